/**
 * AveragePool over any number of spatial axes where the divisor changes along the edges (padding
 * left out of the count, a ceil-mode window overhanging): imported as a fused average of the
 * zero-padded input times a constant map, so it runs on every backend, not the reference alone.
 */
import assert from "node:assert/strict";
import { assertClose, numbers } from "../../jit/testing/testing.ts";
import { OnnxModel } from "../model.ts";
import { type AttributeProto, encodeModel } from "../wire/proto.ts";
import "../../mod.ts";

const tensor = (name: string, dims: number[]) => ({
  name,
  type: { tensorType: { elemType: 1, shape: { dim: dims.map((d) => ({ dimValue: d })) } } },
});
const ints = (name: string, v: number[]): AttributeProto => ({ name, type: 7, ints: v });
const int = (name: string, i: number): AttributeProto => ({ name, type: 2, i });

/** The average over each window's elements inside `x` (N = C = 1), by the definition. */
function averages(
  x: Float32Array,
  dims: number[],
  k: number[],
  s: number[],
  pads: number[],
  out: number[],
) {
  const rank = dims.length, y: number[] = [];
  const at = (o: number[]) => o.reduce((p, c, i) => p * dims[i] + c, 0);
  const each = (o: number[], axis: number, visit: (o: number[]) => void) => {
    if (axis === rank) return visit(o);
    for (let i = 0; i < out[axis]; i++) each([...o, i], axis + 1, visit);
  };
  each([], 0, (o) => {
    let sum = 0, n = 0;
    const taps = (t: number[], axis: number): void => {
      if (axis === rank) {
        const c = t.map((v, i) => o[i] * s[i] - pads[i] + v);
        if (c.every((v, i) => v >= 0 && v < dims[i])) (sum += x[at(c)], n++);
        return;
      }
      for (let v = 0; v < k[axis]; v++) taps([...t, v], axis + 1);
    };
    taps([], 0);
    y.push(sum / n);
  });
  return y;
}

for (const backend of ["reference", "wasm", "webgpu"]) {
  Deno.test(`${backend}: 1-D and 3-D AveragePool leave padding out of the count, ceil mode too`, async () => {
    const cases: { dims: number[]; k: number[]; s: number[]; pads: number[]; ceil: number }[] = [
      { dims: [13], k: [3], s: [2], pads: [1], ceil: 0 },
      { dims: [12], k: [4], s: [3], pads: [0], ceil: 1 },
      { dims: [5, 6, 7], k: [3, 2, 3], s: [2, 2, 1], pads: [1, 0, 1], ceil: 1 },
    ];
    for (const { dims, k, s, pads, ceil } of cases) {
      const rank = dims.length;
      const out = dims.map((d, i) => {
        const span = d + 2 * pads[i] - k[i];
        return (ceil ? Math.ceil(span / s[i]) : Math.floor(span / s[i])) + 1;
      });
      const m = OnnxModel.fromBytes(encodeModel({
        irVersion: 9,
        opsetImport: [{ domain: "", version: 19 }],
        graph: {
          name: "g",
          node: [{
            opType: "AveragePool",
            input: ["x"],
            output: ["y"],
            attribute: [
              ints("kernel_shape", k),
              ints("strides", s),
              ints("pads", [...pads, ...pads]),
              int("ceil_mode", ceil),
            ],
          }],
          initializer: [],
          input: [tensor("x", [1, 1, ...dims])],
          output: [tensor("y", [1, 1, ...out])],
        },
      }));
      const x = Float32Array.from({ length: dims.reduce((p, d) => p * d) }, (_, i) => (i * 7) % 11);
      const y = await m.run({ x: { data: x, shape: [1, 1, ...dims], dtype: "f32" } }, {
        backend,
        cache: false,
      });
      assert.deepEqual(y.y.shape, [1, 1, ...out], `rank ${rank}`);
      const want = averages(x, dims, k, s, pads, out);
      assertClose(numbers(y.y.data), want, { atol: 1e-5, rtol: 1e-5, message: `rank ${rank}` });
      m.dispose();
    }
  });
}
