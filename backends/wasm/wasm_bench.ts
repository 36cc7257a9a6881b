/**
 * kiln's own kernel benchmarks on the wasm backend (`deno bench -A` at the root, no peer library
 * involved): a matmul with its bias and activation, a softmax row kernel, a layer norm, a long
 * elementwise chain and a 3×3 convolution, each compiled once and run with fixed-seed inputs.
 * The comparisons with ONNX Runtime Web, TensorFlow.js and jax-js are `deno task bench:peers`.
 *
 * @module
 */
import { compile, type Executable, GraphBuilder, hostTensor, WasmBackend } from "../../mod.ts";
import { uniform } from "../../jit/support/random.ts";

/** One thread, so that a busy machine's core count does not decide the numbers' meaning. */
const backend = new WasmBackend({ threads: 1 });

/** A compiled graph and its seeded inputs. */
async function prepared(
  build: (b: GraphBuilder) => void,
  inputs: Record<string, number[]>,
): Promise<{ exe: Executable; feeds: Record<string, ReturnType<typeof hostTensor>> }> {
  const b = new GraphBuilder();
  build(b);
  const exe = await compile(b.build(), { backend, cache: false });
  const feeds = Object.fromEntries(
    Object.entries(inputs).map(([name, shape], i) => {
      const n = shape.reduce((a, d) => a * d, 1);
      return [name, hostTensor(uniform(n, 100 + i), shape)];
    }),
  );
  return { exe, feeds };
}

const cases: [string, Promise<Awaited<ReturnType<typeof prepared>>>][] = [
  [
    "matmul 256×512·512×256 + bias, relu",
    prepared((b) => {
      const w = b.param("w", [512, 256], "f32", uniform(512 * 256, 1));
      const bias = b.param("bias", [256], "f32", uniform(256, 2));
      b.output(
        "y",
        b.op("Relu", [b.op("Add", [b.op("MatMul", [b.input("x", [256, 512]), w]), bias])]),
      );
    }, { x: [256, 512] }),
  ],
  [
    "softmax 512×1024",
    prepared((b) => {
      b.output("y", b.op("Softmax", [b.input("x", [512, 1024])], { axis: -1 }));
    }, { x: [512, 1024] }),
  ],
  [
    "layer norm 512×768",
    prepared((b) => {
      const scale = b.param("scale", [768], "f32", uniform(768, 3));
      const shift = b.param("shift", [768], "f32", uniform(768, 4));
      b.output("y", b.op("LayerNormalization", [b.input("x", [512, 768]), scale, shift]));
    }, { x: [512, 768] }),
  ],
  [
    "elementwise chain over 1M",
    prepared((b) => {
      const x = b.input("x", [1 << 20]);
      b.output("y", b.op("Tanh", [b.op("Mul", [b.op("Exp", [b.op("Neg", [x])]), x])]));
    }, { x: [1 << 20] }),
  ],
  [
    "conv 3×3, 32→32 channels, 56×56",
    prepared((b) => {
      const w = b.param("w", [32, 32, 3, 3], "f32", uniform(32 * 32 * 9, 5));
      b.output("y", b.op("Conv", [b.input("x", [1, 32, 56, 56]), w], { pads: [1, 1, 1, 1] }));
    }, { x: [1, 32, 56, 56] }),
  ],
];

for (const [name, ready] of cases) {
  Deno.bench({
    name: `wasm ${name}`,
    group: "wasm kernels",
    n: 30,
    warmup: 5,
    async fn() {
      const { exe, feeds } = await ready;
      await exe.run(feeds);
    },
  });
}
