/**
 * ResNet-50's convolutions (batch 1) on wasm as ONNX Runtime's static QDQ quantization runs them
 * (QLinearConv: u8 activations, i8 weights with per-channel zero points, the output requantized)
 * beside the same convolution in f32: milliseconds a run (median after warm-up, the input from
 * the host) and int8 ÷ f32, on one thread and on `--threads` (default: every core). Issue 52
 * asks for quantized models at ≤ 0.7× their f32 form on wasm.
 *
 *   deno run -A --config deno.json bench/int_convs.ts [--threads N] [--runs 15] [--json]
 *
 * @module
 */
import { compile, GraphBuilder, type HostTensor, WasmBackend } from "../mod.ts";
import { uniform } from "../jit/support/random.ts";
import { median } from "./timed.ts";

const arg = (name: string) => {
  const i = Deno.args.indexOf(name);
  return i >= 0 ? Deno.args[i + 1] : undefined;
};
const runs = Number(arg("--runs") ?? 15);
const threads = Number(arg("--threads") ?? navigator.hardwareConcurrency);
const json = Deno.args.includes("--json");

/** [input channels, side, output channels, kernel, stride]: each kind of ResNet-50's convs once. */
const SHAPES: [number, number, number, number, number][] = [
  [64, 56, 64, 1, 1],
  [64, 56, 64, 3, 1],
  [64, 56, 256, 1, 1],
  [256, 56, 64, 1, 1],
  [256, 56, 512, 1, 2],
  [128, 56, 128, 3, 2],
  [128, 28, 128, 3, 1],
  [512, 28, 128, 1, 1],
  [256, 14, 256, 3, 1],
  [1024, 14, 256, 1, 1],
  [256, 14, 1024, 1, 1],
  [512, 7, 512, 3, 1],
  [2048, 7, 512, 1, 1],
  [512, 7, 2048, 1, 1],
];

/** The convolution of `shape` as QLinearConv (`int8`) or as an f32 Conv, and its input. */
function convolution([c, side, m, k, stride]: number[], int8: boolean) {
  const b = new GraphBuilder();
  const xShape = [1, c, side, side], wShape = [m, c, k, k];
  const attrs = {
    kernel_shape: [k, k],
    pads: Array(4).fill((k - 1) / 2),
    strides: [stride, stride],
  };
  const count = (s: number[]) => s.reduce((p, d) => p * d);
  const f = (v: number) => b.constant(new Float32Array([v]), [], "f32");
  let y;
  if (int8) {
    const w = Int8Array.from(uniform(count(wShape), 1, -40, 40), Math.round);
    y = b.op("QLinearConv", [
      b.input("x", xShape, "u8"),
      f(0.02),
      b.constant(new Uint8Array([0]), [], "u8"),
      b.constant(w, wShape, "i8"),
      b.constant(Float32Array.from(uniform(m, 2, 0.001, 0.002)), [m], "f32"),
      b.constant(new Int8Array(m), [m], "i8"),
      f(0.05),
      b.constant(new Uint8Array([0]), [], "u8"),
    ], attrs);
  } else {
    const w = b.constant(Float32Array.from(uniform(count(wShape), 1, -0.1, 0.1)), wShape, "f32");
    y = b.op("Conv", [b.input("x", xShape, "f32"), w], attrs);
  }
  const x: HostTensor = int8
    ? {
      data: Uint8Array.from(uniform(count(xShape), 3, 0, 255), Math.floor),
      shape: xShape,
      dtype: "u8",
    }
    : { data: Float32Array.from(uniform(count(xShape), 3, 0, 1)), shape: xShape, dtype: "f32" };
  return { graph: b.output("y", y).build(), x };
}

/** Median ms of a run of `shape`'s convolution on `backend`. */
async function timed(shape: number[], int8: boolean, backend: WasmBackend): Promise<number> {
  const { graph, x } = convolution(shape, int8);
  using exe = await compile(graph, { backend, cache: false });
  // Threaded, the program's tuner alternates one thread and all for its first runs: past them.
  const warm = backend.capabilities().threads > 1 ? 40 : 3;
  for (let i = 0; i < warm; i++) await exe.run({ x });
  const times: number[] = [];
  for (let i = 0; i < runs; i++) {
    const t = performance.now();
    await exe.run({ x });
    times.push(performance.now() - t);
  }
  return median(times);
}

const rows = [];
for (const count of [...new Set([1, threads])]) {
  const backend = new WasmBackend({ threads: count, warmUpMs: 0 });
  for (const shape of SHAPES) {
    const [int8, f32] = [await timed(shape, true, backend), await timed(shape, false, backend)];
    const [c, side, m, k, stride] = shape;
    rows.push({ threads: count, conv: `${c}→${m} ${k}×${k}/${stride} at ${side}²`, int8, f32 });
  }
  backend.dispose();
}
if (json) console.log(JSON.stringify(rows, null, 2));
else {
  console.log(
    "| threads | convolution | int8 ms | f32 ms | int8 ÷ f32 |\n| ---: | --- | ---: | ---: | ---: |",
  );
  for (const r of rows) {
    const ratio = (r.int8 / r.f32).toFixed(2);
    console.log(
      `| ${r.threads} | ${r.conv} | ${r.int8.toFixed(2)} | ${r.f32.toFixed(2)} | ${ratio} |`,
    );
  }
}
