/**
 * int64 at the import boundary: values stored in `int64_data` decode exactly (INT64_MAX is "to
 * the end", not INT64_MIN), inputs a model specialises on are range-checked instead of wrapped,
 * and specialisations are keyed by the inputs' bits (+0 and -0 apart).
 */
import assert from "node:assert/strict";
import { KilnError } from "../jit/errors.ts";
import type { HostTensor } from "../jit/host_tensor.ts";
import { OnnxModel } from "./model.ts";
import { encodeModel, type ModelProto } from "./proto.ts";
import "../mod.ts";

type Graph = ModelProto["graph"];
const input = (name: string, elemType: number, shape: number[]) => ({
  name,
  type: { tensorType: { elemType, shape: { dim: shape.map((d) => ({ dimValue: d })) } } },
});

function model(graph: Omit<Graph, "name" | "output">, outputs: [string, number][]): OnnxModel {
  return OnnxModel.fromBytes(encodeModel({
    irVersion: 8,
    opsetImport: [{ domain: "", version: 17 }],
    graph: {
      name: "g",
      ...graph,
      output: outputs.map(([name, elemType]) => ({ name, type: { tensorType: { elemType } } })),
    },
  }));
}

const f32 = (values: number[]): HostTensor => ({
  data: Float32Array.from(values),
  shape: [values.length],
  dtype: "f32",
});
const i64 = (values: bigint[]): HostTensor => ({
  data: BigInt64Array.from(values),
  shape: [values.length],
  dtype: "i64",
});
const BACKENDS = ["reference", "wasm"];
const outOfRange = (e: unknown) =>
  e instanceof KilnError && /does not fit/.test(e.message) && /Fix:/.test(e.message);

Deno.test("Slice ends of INT64_MAX in int64_data run to the end of the axis", async () => {
  const m = model({
    node: [{
      opType: "Slice",
      input: ["x", "starts", "ends", "axes"],
      output: ["y"],
      attribute: [],
    }],
    initializer: [
      { name: "starts", dims: [1], dataType: 7, int64Data: [1] },
      { name: "ends", dims: [1], dataType: 7, int64Data: [9223372036854775807n] },
      { name: "axes", dims: [1], dataType: 7, int64Data: [0] },
    ],
    input: [input("x", 1, [5])],
  }, [["y", 1]]);
  for (const backend of BACKENDS) {
    const { y } = await m.run({ x: f32([1, 2, 3, 4, 5]) }, { backend });
    assert.deepEqual([...y.data], [2, 3, 4, 5], backend);
  }
  m.dispose();
});

Deno.test("int64 inputs a model specialises on are range-checked, never wrapped", async () => {
  const reshape = model({
    node: [{ opType: "Reshape", input: ["x", "s"], output: ["y"], attribute: [] }],
    initializer: [],
    input: [input("x", 1, [4]), input("s", 7, [2])],
  }, [["y", 1]]);
  const fill = model({
    node: [{ opType: "ConstantOfShape", input: ["s"], output: ["y"], attribute: [] }],
    initializer: [],
    input: [input("s", 7, [1])],
  }, [["y", 1]]);
  for (const backend of BACKENDS) {
    const x = f32([1, 2, 3, 4]);
    await assert.rejects(
      () => reshape.run({ x, s: i64([2n ** 32n + 2n, -1n]) }, { backend }),
      outOfRange,
    );
    assert.deepEqual((await reshape.run({ x, s: i64([2n, -1n]) }, { backend })).y.shape, [2, 2]);
    await assert.rejects(() => fill.run({ s: i64([2n ** 32n + 1n]) }, { backend }), outOfRange);
  }
  reshape.dispose();
  fill.dispose();
});

Deno.test("specialisations are keyed by bits: -0 does not reuse the +0 executable", async () => {
  const m = model({
    node: [
      { opType: "Reciprocal", input: ["x"], output: ["r"], attribute: [] },
      { opType: "Reshape", input: ["r", "s"], output: ["y"], attribute: [] },
    ],
    initializer: [],
    input: [input("x", 1, [1]), input("s", 7, [2])],
  }, [["y", 1]]);
  for (const backend of BACKENDS) {
    const s = i64([1n, 1n]);
    assert.deepEqual([...(await m.run({ x: f32([0]), s }, { backend })).y.data], [Infinity]);
    assert.deepEqual([...(await m.run({ x: f32([-0]), s }, { backend })).y.data], [-Infinity]);
  }
  m.dispose();
});
