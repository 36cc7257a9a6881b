import assert from "node:assert/strict";
import { KilnError } from "../../jit/support/errors.ts";
import type { HostTensor } from "../../jit/ir/host_tensor.ts";
import { OnnxModel } from "../model.ts";
import { encodeModel, type GraphProto, type ValueInfoProto } from "../wire/proto.ts";
import "../../mod.ts";

const value = (name: string, shape?: number[], elemType = 1): ValueInfoProto => ({
  name,
  type: {
    tensorType: {
      elemType,
      ...(shape ? { shape: { dim: shape.map((d) => ({ dimValue: d })) } } : {}),
    },
  },
});

/**
 * An opset-8 Scan over batch 2 and 3 steps: the state sums the scanned rows (`s' = s + x_t`)
 * and each step outputs `2·s'`; `lens` is the model's `sequence_lens` initializer, if any.
 */
function scan8(directions: number[], lens?: number[]): OnnxModel {
  const body: GraphProto = {
    name: "body",
    initializer: [],
    node: [
      { opType: "Add", input: ["s", "x"], output: ["s2"], attribute: [] },
      { opType: "Add", input: ["s2", "s2"], output: ["y"], attribute: [] },
    ],
    input: [value("s", [2]), value("x", [2])],
    output: [value("s2", [2]), value("y", [2])],
  };
  return OnnxModel.fromBytes(encodeModel({
    irVersion: 3,
    opsetImport: [{ domain: "", version: 8 }],
    graph: {
      name: "g",
      node: [{
        opType: "Scan",
        input: [lens ? "lens" : "", "s0", "xs"],
        output: ["s", "ys"],
        attribute: [
          { name: "body", type: 5, g: body },
          { name: "num_scan_inputs", type: 2, i: 1 },
          { name: "directions", type: 7, ints: directions },
        ],
      }],
      initializer: lens ? [{ name: "lens", dims: [2], dataType: 6, int32Data: lens }] : [],
      input: [value("s0", [2, 2]), value("xs", [2, 3, 2])],
      output: [value("s"), value("ys")],
    },
  }));
}

const f32 = (values: number[], shape: number[]): HostTensor => ({
  data: Float32Array.from(values),
  shape,
  dtype: "f32",
});

Deno.test("Scan before opset 9: each batch element scans its own rows, forwards or reversed", async () => {
  const s0 = f32([1, 2, 10, 20], [2, 2]);
  // Batch 0 rows (1,1), (2,2), (3,3); batch 1 rows (100,0), (0,100), (5,5).
  const xs = f32([1, 1, 2, 2, 3, 3, 100, 0, 0, 100, 5, 5], [2, 3, 2]);
  for (const backend of ["reference", "wasm"]) {
    const out = await scan8([0], [3, 3]).run({ s0, xs }, { backend });
    assert.deepEqual(out.s.shape, [2, 2]);
    assert.deepEqual(Array.from(out.s.data as Float32Array), [7, 8, 115, 125]);
    assert.deepEqual(out.ys.shape, [2, 3, 2]);
    // Partial sums doubled, step by step.
    assert.deepEqual(
      Array.from(out.ys.data as Float32Array),
      [4, 6, 8, 10, 14, 16, 220, 40, 220, 240, 230, 250],
    );
    // Reversed: the last row first (outputs in the order computed).
    const back = await scan8([1]).run({ s0, xs }, { backend });
    assert.deepEqual(Array.from(back.s.data as Float32Array), [7, 8, 115, 125]);
    assert.deepEqual(
      Array.from(back.ys.data as Float32Array),
      [8, 10, 12, 14, 14, 16, 30, 50, 30, 250, 230, 250],
    );
  }
});

Deno.test("Scan before opset 9: sequence lengths short of the inputs are a typed error", async () => {
  const feeds = { s0: f32([0, 0, 0, 0], [2, 2]), xs: f32(new Array(12).fill(1), [2, 3, 2]) };
  await assert.rejects(
    () => scan8([0], [3, 2]).run(feeds),
    (e) =>
      e instanceof KilnError && /sequence_lens \[3,2\]/.test(e.message) && /Fix:/.test(e.message),
  );
});
