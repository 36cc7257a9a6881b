/**
 * The workloads written in TensorFlow.js, shared by the CPU bench (cpu, wasm backends) and the GPU
 * bench (webgpu backend). It imports no npm package itself, so each bench carries only the tfjs
 * backends it loads.
 *
 * @module
 */
import type { PeerRun, Workload } from "./workloads.ts";

// deno-lint-ignore no-explicit-any
type Any = any;

/** Runs `w` with the TensorFlow.js namespace `tf` on its current backend. */
export function tfjsRun(tf: Any, w: Workload): PeerRun {
  const t = Object.fromEntries(
    Object.entries(w.inputs).map(([k, v]) => [k, tf.tensor(v.data, v.shape)]),
  );
  const f: () => Any = {
    W1: () =>
      tf.sub(
        tf.mul(tf.relu(tf.add(tf.mul(t.x, 1.5), 0.5)), tf.sigmoid(t.x)),
        tf.div(tf.mul(t.x, t.x), 8),
      ),
    W2: () => tf.matMul(t.a, t.b),
    W3: () => tf.softmax(t.x),
    W4: () => {
      const { mean, variance } = tf.moments(t.x, -1, true);
      return tf.div(tf.sub(t.x, mean), tf.sqrt(tf.add(variance, 1e-5)));
    },
    W5: () =>
      tf.softmax(tf.add(tf.matMul(tf.relu(tf.add(tf.matMul(t.x, t.w1), t.b1)), t.w2), t.b2)),
    W6: () => tf.add(t.x, 1),
    co: () => tf.neg(tf.neg(t.x)),
  }[w.id.slice(0, 2)]!;
  return async () => {
    const y = tf.tidy(f);
    const data = await y.data();
    y.dispose();
    return data as Float32Array;
  };
}
