/**
 * Reference kernels of TopK and Det (`jit/ops/ranking.ts`): TopK sorts each line along its axis
 * (NaN above every number, ties to the lower index) and takes the first k; Det eliminates with
 * partial pivoting in float64.
 *
 * @module
 */
import { sizeOf } from "../../jit/ir/shape.ts";
import type { Kernel } from "./kernel.ts";
import { read, written } from "./tensor_io.ts";

/** Kernels of TopK and Det, by op name. */
export const rankingKernels: Record<string, Kernel> = {
  TopK: ({ inputs: [x], outputs, ctx }) => {
    const v = read(x), shape = x.shape, axis = ctx.int("axis"), k = ctx.int("k");
    const largest = ctx.int("largest", 1) === 1, n = shape[axis];
    const inner = sizeOf(shape.slice(axis + 1)), outer = sizeOf(shape.slice(0, axis));
    const values = new Float64Array(outer * k * inner), indices = new Float64Array(values.length);
    // NaN above every number: first when largest, last when smallest.
    const key = (a: number) => (Number.isNaN(a) ? (largest ? Infinity : -Infinity) : a);
    for (let o = 0; o < outer; o++) {
      for (let i = 0; i < inner; i++) {
        const at = (j: number) => (o * n + j) * inner + i;
        const order = [...Array(n).keys()].sort((p, q) => {
          const [a, b] = [v[at(p)], v[at(q)]];
          const nans = +Number.isNaN(b) - +Number.isNaN(a);
          if (nans !== 0) return largest ? nans : -nans;
          const d = largest ? key(b) - key(a) : key(a) - key(b);
          return d === 0 || Number.isNaN(d) ? p - q : d;
        });
        for (let r = 0; r < k; r++) {
          values[(o * k + r) * inner + i] = v[at(order[r])];
          indices[(o * k + r) * inner + i] = order[r];
        }
      }
    }
    return [written(outputs[0].dtype, values), written("i32", indices)];
  },
  Det: ({ inputs: [x], outputs }) => {
    const v = read(x), n = x.shape.at(-1)!;
    const out = new Float64Array(sizeOf(x.shape.slice(0, -2)));
    for (let m = 0; m < out.length && n > 0; m++) {
      const a = Array.from(
        { length: n },
        (_, i) => Array.from({ length: n }, (_, j) => v[m * n * n + i * n + j]),
      );
      let det = 1;
      for (let c = 0; c < n; c++) {
        let pivot = c;
        for (let r = c + 1; r < n; r++) if (Math.abs(a[r][c]) > Math.abs(a[pivot][c])) pivot = r;
        if (pivot !== c) [a[c], a[pivot], det] = [a[pivot], a[c], -det];
        det *= a[c][c];
        if (a[c][c] === 0) break;
        for (let r = c + 1; r < n; r++) {
          const f = a[r][c] / a[c][c];
          for (let j = c; j < n; j++) a[r][j] -= f * a[c][j];
        }
      }
      out[m] = det;
    }
    if (n === 0) out.fill(1);

    return [written(outputs[0].dtype, out)];
  },
};
