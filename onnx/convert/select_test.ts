import assert from "node:assert/strict";
import { KilnError } from "../../jit/support/errors.ts";
import type { HostTensor } from "../../jit/ir/host_tensor.ts";
import { OnnxModel } from "../model.ts";
import { encodeModel, type ModelProto } from "../wire/proto.ts";
import "../../mod.ts";

type Graph = ModelProto["graph"];
type Attribute = Graph["node"][0]["attribute"][number];
const int = (name: string, v: number): Attribute => ({ name, type: 2, i: v });
const input = (name: string, elemType: number, shape: number[]) => ({
  name,
  type: { tensorType: { elemType, shape: { dim: shape.map((d) => ({ dimValue: d })) } } },
});

/** A model of `node`; outputs named `i64:…` are int64, the others float. */
function model(node: Graph["node"], inputs: Graph["input"], outputs: string[]): OnnxModel {
  return OnnxModel.fromBytes(encodeModel({
    irVersion: 8,
    opsetImport: [{ domain: "", version: 17 }],
    graph: {
      name: "g",
      node,
      initializer: [],
      input: inputs,
      output: outputs.map((name) => ({
        name: name.replace("i64:", ""),
        type: { tensorType: { elemType: name.startsWith("i64:") ? 7 : 1 } },
      })),
    },
  }));
}

const f32 = (values: number[], shape: number[]): HostTensor => ({
  data: Float32Array.from(values),
  shape,
  dtype: "f32",
});
const i64 = (values: number[]): HostTensor => ({
  data: BigInt64Array.from(values.map(BigInt)),
  shape: [values.length],
  dtype: "i64",
});
const numbers = (t: HostTensor) => Array.from(t.data as ArrayLike<number | bigint>, Number);

Deno.test("NonMaxSuppression keeps boxes by score, drops overlaps, caps per class", async () => {
  const nms = (center = 0) =>
    model(
      [{
        opType: "NonMaxSuppression",
        input: ["boxes", "scores", "most", "iou", "floor"],
        output: ["y"],
        attribute: [int("center_point_box", center)],
      }],
      [
        input("boxes", 1, [1, 5, 4]),
        input("scores", 1, [1, 2, 5]),
        input("most", 7, [1]),
        input("iou", 1, [1]),
        input("floor", 1, [1]),
      ],
      ["i64:y"],
    );
  // Corners in either order: box 1 overlaps box 0 with IoU 0.81, box 3 touches nothing, box 4
  // equals box 2 with the same score (the lower index wins the tie).
  const boxes = f32(
    [
      [0, 0, 1, 1],
      [1, 1, 0.1, 0.1],
      [2, 2, 3, 3],
      [5, 5, 6, 6],
      [2, 2, 3, 3],
    ].flat(),
    [1, 5, 4],
  );
  const scores = f32([0.9, 0.8, 0.7, 0.1, 0.7, 0.2, 0.3, 0.4, 0.5, 0.6], [1, 2, 5]);
  const run = async (m: OnnxModel, most: number, iou: number, floor: number, b = boxes) =>
    numbers(
      (await m.run({
        boxes: b,
        scores,
        most: i64([most]),
        iou: f32([iou], [1]),
        floor: f32([floor], [1]),
      })).y,
    );
  const m = nms();
  // Class 0: 0 (0.9) kept, 1 (0.8) overlaps it, 2 (0.7) kept, 4 (0.7, after 2) overlaps 2, 3 is
  // under the floor. Class 1: 4, 3 kept, 2 overlaps 4, 1 kept, 0 overlaps 1.
  assert.deepEqual(await run(m, 10, 0.5, 0.15), [0, 0, 0, 0, 0, 2, 0, 1, 4, 0, 1, 3, 0, 1, 1]);
  // At most one box a class; with a threshold of 0.9 only boxes 2 and 4 (IoU 1) suppress.
  assert.deepEqual(await run(m, 1, 0.5, 0), [0, 0, 0, 0, 1, 4]);
  assert.deepEqual((await run(m, 3, 0.9, 0)).length, 18);
  assert.deepEqual(await run(m, 0, 0.5, 0), []);
  // The same boxes as centers and sizes.
  const centered = f32(
    [
      [0.5, 0.5, 1, 1],
      [0.55, 0.55, 0.9, 0.9],
      [2.5, 2.5, 1, 1],
      [5.5, 5.5, 1, 1],
      [2.5, 2.5, 1, 1],
    ].flat(),
    [1, 5, 4],
  );
  assert.deepEqual(await run(nms(1), 1, 0.5, 0, centered), [0, 0, 0, 0, 1, 4]);
});

Deno.test("NonMaxSuppression over boxes and scores too large to specialise on is a typed error", async () => {
  // Inputs of up to 64 elements are specialised on (and the Sigmoid folded); these are larger.
  const m = model(
    [
      { opType: "Sigmoid", input: ["logits"], output: ["scores"], attribute: [] },
      { opType: "NonMaxSuppression", input: ["boxes", "scores"], output: ["y"], attribute: [] },
    ],
    [input("boxes", 1, [1, 100, 4]), input("logits", 1, [1, 1, 100])],
    ["i64:y"],
  );
  await assert.rejects(
    m.run({
      boxes: f32(new Array(400).fill(0), [1, 100, 4]),
      logits: f32(new Array(100).fill(0), [1, 1, 100]),
    }),
    (e: unknown) =>
      e instanceof KilnError && /input is computed at run time/.test(e.message) &&
      /Fix:/.test(e.message),
  );
});

Deno.test("Unique: sorted or in order of first occurrence, along an axis or flat, NaN once", async () => {
  const uniq = (shape: number[], attribute: Attribute[]) =>
    model(
      [{ opType: "Unique", input: ["x"], output: ["y", "first", "inverse", "counts"], attribute }],
      [input("x", 1, shape)],
      ["y", "i64:first", "i64:inverse", "i64:counts"],
    );
  const flat = [2, 1, NaN, 1, 3, NaN, 2];
  const all = async (m: OnnxModel, x: HostTensor) => {
    const r = await m.run({ x });
    return [r.y, r.first, r.inverse, r.counts].map(numbers);
  };
  assert.deepEqual(await all(uniq([7], []), f32(flat, [7])), [
    [1, 2, 3, NaN],
    [1, 0, 4, 2],
    [1, 0, 3, 0, 2, 3, 1],
    [2, 2, 1, 2],
  ]);
  assert.deepEqual(await all(uniq([7], [int("sorted", 0)]), f32(flat, [7])), [
    [2, 1, NaN, 3],
    [0, 1, 2, 4],
    [0, 1, 2, 1, 3, 2, 0],
    [2, 2, 2, 1],
  ]);
  // Along axis 1 of [2, 3, 2]: column slices x[:, j, :] compared element by element.
  const x = f32(
    [
      [[1, 0], [0, 0], [1, 0]],
      [[2, 2], [0, 1], [2, 2]],
    ].flat(2),
    [2, 3, 2],
  );
  const [y, first, inverse, counts] = await all(uniq([2, 3, 2], [int("axis", -2)]), x);
  assert.deepEqual(first, [1, 0]);
  assert.deepEqual(inverse, [1, 0, 1]);
  assert.deepEqual(counts, [1, 2]);
  assert.deepEqual(y, [0, 0, 1, 0, 0, 1, 2, 2]);
});
