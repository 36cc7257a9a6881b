/**
 * A ResNet-50-shaped network as `torch.onnx.export` (TorchScript, opset 17) writes torchvision's
 * `resnet50` in eval mode, BatchNorm folded into the convolutions' weights and biases: the 7×7
 * stem with its max pool, sixteen bottlenecks (1×1, 3×3, 1×1, the first of each stage with a
 * strided 1×1 projection) adding their input and applying Relu, global average pooling, Flatten
 * and the 1000-way Gemm — random weights, for CPU timings on a machine without PyTorch (the GPU
 * machine exports the real one: `bench/export_full_models.py`).
 *
 *   deno run -A bench/resnet_shaped.ts OUT.onnx [--batch 1]
 *
 * Writes OUT.onnx and beside it its input (`OUT.in.x.float32.bin`, batch×3×224×224).
 *
 * @module
 */
import { parseArgs } from "node:util";
import { int, ints, OnnxWriter } from "./onnx_writer.ts";

const { values, positionals } = parseArgs({
  args: Deno.args,
  options: { batch: { type: "string", default: "1" } },
  allowPositionals: true,
});
const out = positionals[0];
if (!out) throw new Error("usage: bench/resnet_shaped.ts OUT.onnx [--batch 1]");
const batch = Number(values.batch);
const w = new OnnxWriter(17);
const node = w.node.bind(w);

/** A convolution with a folded BatchNorm (weights scaled to keep activations in range). */
function conv(x: string, name: string, cin: number, cout: number, k: number, stride = 1): string {
  const scale = Math.sqrt(2 / (cin * k * k));
  const weight = w.weight(`${name}.weight`, [cout, cin, k, k], scale);
  return node("Conv", [x, weight, w.weight(`${name}.bias`, [cout], 0.05)], `${name}.out`, [
    ints("kernel_shape", [k, k]),
    ints("strides", [stride, stride]),
    ints("pads", new Array(4).fill((k - 1) / 2)),
  ]);
}

const relu = (x: string) => node("Relu", [x], `${x}.relu`);

/** A bottleneck of `width` from `cin` channels, projected where `stride` or channels change. */
function bottleneck(x: string, name: string, cin: number, width: number, stride: number): string {
  const a = relu(conv(x, `${name}.conv1`, cin, width, 1));
  const b = relu(conv(a, `${name}.conv2`, width, width, 3, stride));
  const c = conv(b, `${name}.conv3`, width, 4 * width, 1);
  const skip = cin !== 4 * width || stride !== 1
    ? conv(x, `${name}.down`, cin, 4 * width, 1, stride)
    : x;
  return relu(node("Add", [c, skip], `${name}.sum`));
}

let h = relu(conv("x", "stem", 3, 64, 7, 2));
h = node("MaxPool", [h], "pool", [
  ints("kernel_shape", [3, 3]),
  ints("strides", [2, 2]),
  ints("pads", [1, 1, 1, 1]),
]);
let cin = 64;
[[3, 64, 1], [4, 128, 2], [6, 256, 2], [3, 512, 2]].forEach(([blocks, width, stride], s) => {
  for (let b = 0; b < blocks; b++) {
    h = bottleneck(h, `layer${s + 1}.${b}`, cin, width, b === 0 ? stride : 1);
    cin = 4 * width;
  }
});
const pooled = node("Flatten", [node("GlobalAveragePool", [h], "gap")], "flat", [int("axis", 1)]);
node(
  "Gemm",
  [pooled, w.weight("fc.weight", [1000, 2048], 0.02), w.weight("fc.bias", [1000], 0.02)],
  "y",
  [
    int("transB", 1),
  ],
);
const pixels = Float32Array.from({ length: batch * 3 * 224 * 224 }, () => w.random() * 2 - 1);
w.write(out, [["x", "float32", [batch, 3, 224, 224], pixels]], [["y", [batch, 1000]]]);
console.log(`${out}: batch ${batch}`);
