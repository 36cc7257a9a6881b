/**
 * The peers, each loaded from npm at an exact version, with the benchmark workloads written in
 * their own APIs: TensorFlow.js (cpu, wasm), ONNX Runtime Web (wasm, fed the workload's ONNX model
 * or kiln's export of its graph) and jax-js. Lessons from making them run under Deno: tfjs-wasm
 * needs `setWasmPaths` pointing at its package's `dist/` and runs single-threaded (it sees Node);
 * ONNX Runtime's wasm threads work (`numThreads`, set to the core count as kiln's default);
 * jax-js needs `init()` and `defaultDevice`, and its ops consume their operands (`.ref` keeps one
 * alive). Model workloads (ONNX files) run on ONNX Runtime only among the peers.
 *
 * @module
 */
import { toOnnx } from "../onnx/export/export.ts";
import { tfjsRun } from "./tfjs_program.ts";
import type { PeerRun, Workload } from "./workloads.ts";

// deno-lint-ignore no-explicit-any
type Any = any;

let tfjs: Promise<Any> | undefined;

/** TensorFlow.js with the cpu and wasm backends registered. */
export function loadTfjs(): Promise<Any> {
  return tfjs ??= (async () => {
    const tf = await import("npm:@tensorflow/tfjs-core@4.22.0");
    await import("npm:@tensorflow/tfjs-backend-cpu@4.22.0");
    const wasm = await import("npm:@tensorflow/tfjs-backend-wasm@4.22.0");
    wasm.setWasmPaths(
      new URL(".", import.meta.resolve("npm:@tensorflow/tfjs-backend-wasm@4.22.0")).pathname,
    );
    return tf;
  })();
}

/** The workload in TensorFlow.js on `backend`. */
export async function tfjsRunner(
  w: Workload,
  backend: "cpu" | "wasm",
): Promise<PeerRun | undefined> {
  if (w.onnx) return undefined;
  const tf = await loadTfjs();
  await tf.setBackend(backend);
  const run = tfjsRun(tf, w);
  return async () => {
    if (tf.getBackend() !== backend) await tf.setBackend(backend);
    return await run();
  };
}

/** The workload in ONNX Runtime Web (wasm): its ONNX model, or kiln's export of its graph. */
export async function ortRunner(w: Workload): Promise<PeerRun> {
  const ort: Any = await import("npm:onnxruntime-web@1.30.0");
  // As many threads as kiln's wasm backend uses by default.
  ort.env.wasm.numThreads = navigator.hardwareConcurrency;
  const session = await ort.InferenceSession.create(w.onnx ?? toOnnx(w.graph));
  const feeds = Object.fromEntries(
    Object.entries(w.inputs).map(([k, v]) => [k, new ort.Tensor("float32", v.data, v.shape)]),
  );
  return async () => (await session.run(feeds)).y.data as Float32Array;
}

let jaxjs: Promise<Any> | undefined;

/** The workload in jax-js on its wasm device (jit-compiled), where its API covers it. */
export async function jaxRunner(w: Workload): Promise<PeerRun | undefined> {
  if (w.onnx) return undefined;
  const jax = await (jaxjs ??= import("npm:@jax-js/jax@0.1.25").then(async (j) => {
    await j.init();
    j.defaultDevice("wasm");
    return j;
  }));
  const np = jax.numpy, nn = jax.nn;
  const fns: Record<string, (...a: Any[]) => Any> = {
    W1: (x) =>
      np.subtract(
        np.multiply(nn.relu(np.add(np.multiply(x.ref, 1.5), 0.5)), nn.sigmoid(x.ref)),
        np.divide(np.multiply(x.ref, x), 8),
      ),
    W2: (a, b) => np.matmul(a, b),
    W3: (x) => nn.softmax(x, -1),
    W6: (x) => np.add(x, 1),
  };
  const f = fns[w.id.slice(0, 2)];
  if (!f) return undefined;
  const jitted = jax.jit(f);
  const names = Object.keys(w.inputs);
  return async () => {
    const args = names.map((k) => np.array(w.inputs[k].data).reshape(w.inputs[k].shape));
    return await jitted(...args).data() as Float32Array;
  };
}
