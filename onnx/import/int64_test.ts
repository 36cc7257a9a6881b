/**
 * int64 at the import boundary: values stored in `int64_data` decode exactly (INT64_MAX is "to
 * the end", not INT64_MIN), inputs a model specialises on are range-checked instead of wrapped,
 * and specialisations are keyed by the inputs' bits (+0 and -0 apart).
 */
import assert from "node:assert/strict";
import { KilnError } from "../../jit/support/errors.ts";
import type { HostTensor } from "../../jit/ir/host_tensor.ts";
import type { OnnxModel } from "../model.ts";
import type { ModelProto } from "../wire/proto.ts";
import { testModel, valueInfo } from "../testdata.ts";
import "../../mod.ts";

type Graph = ModelProto["graph"];
const input = (name: string, elemType: number, shape: number[]) => valueInfo(name, elemType, shape);

/** A model of `graph` whose outputs are declared by element type alone. */
function model(graph: Omit<Graph, "name" | "output">, outputs: [string, number][]): OnnxModel {
  return testModel({
    ...graph,
    output: outputs.map(([name, elemType]) => valueInfo(name, elemType)),
  });
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

/** A typed error about an int64 value past the range kiln holds it in. */
const refused = (e: unknown) =>
  e instanceof KilnError && e.code === "out-of-range" && /int64/.test(e.message) &&
  /Fix:/.test(e.message);

Deno.test("int64 arithmetic past the 32-bit range is exact where kiln holds int64 in f64, a typed error on webgpu", async () => {
  const binary = (opType: string) =>
    model({
      node: [{ opType, input: ["a", "b"], output: ["y"], attribute: [] }],
      initializer: [],
      input: [input("a", 7, [2]), input("b", 7, [2])],
    }, [["y", 7]]);
  const sum = model({
    node: [{
      opType: "ReduceSum",
      input: ["a"],
      output: ["y"],
      attribute: [{ name: "keepdims", type: 2, i: 0 }],
    }],
    initializer: [],
    input: [input("a", 7, [3])],
  }, [["y", 7]]);
  const cast = model({
    node: [{
      opType: "Cast",
      input: ["x"],
      output: ["y"],
      attribute: [{ name: "to", type: 2, i: 7 }],
    }],
    initializer: [],
    input: [input("x", 1, [2])],
  }, [["y", 7]]);
  const mul = binary("Mul"), add = binary("Add");
  const big = i64([100000n, 3n]), twoE9 = i64([2000000000n, 2000000000n, 2000000000n]);
  for (const backend of BACKENDS) {
    const y = async (
      m: OnnxModel,
      feeds: Record<string, HostTensor>,
    ) => [...(await m.run(feeds, { backend })).y.data as BigInt64Array];
    assert.deepEqual(await y(mul, { a: big, b: big }), [10000000000n, 9n], backend);
    assert.deepEqual(
      await y(add, { a: i64([2000000000n, 1n]), b: i64([2000000000n, 1n]) }),
      [4000000000n, 2n],
    );
    assert.deepEqual(await y(sum, { a: twoE9 }), [6000000000n]);
    assert.deepEqual(await y(cast, { x: f32([3e9, -2.5]) }), [3000000000n, -2n]);
    // Past 2^53, where f64 stops holding every integer: refused, never rounded.
    const most = i64([2147483647n, 1n]);
    await assert.rejects(() => mul.run({ a: most, b: most }, { backend }), refused, backend);
    await assert.rejects(() => cast.run({ x: f32([1e17, 0]) }, { backend }), refused);
  }
  // WebGPU holds int64 in 32 bits: the same runs are refused there, and in range they answer.
  const backend = "webgpu";
  await assert.rejects(() => mul.run({ a: big, b: big }, { backend }), refused);
  await assert.rejects(() => sum.run({ a: twoE9 }, { backend }), refused);
  await assert.rejects(() => cast.run({ x: f32([3e9, 1]) }, { backend }), refused);
  assert.deepEqual(
    (await mul.run({ a: i64([46340n, -7n]), b: i64([46340n, 3n]) }, { backend })).y.data,
    BigInt64Array.from([2147395600n, -21n]),
  );
  assert.deepEqual(
    (await cast.run({ x: f32([-2147483648, 2.5]) }, { backend })).y.data,
    BigInt64Array.from([-2147483648n, 2n]),
  );
  for (const m of [mul, add, sum, cast]) m.dispose();
});

Deno.test("past 2^31, int64 division truncates, Mod takes the divisor's sign, a cast to int32 wraps, an index is refused", async () => {
  const arithmetic = model({
    node: [
      { opType: "Mul", input: ["a", "a"], output: ["p"], attribute: [] },
      { opType: "Div", input: ["p", "b"], output: ["q"], attribute: [] },
      { opType: "Mod", input: ["p", "b"], output: ["r"], attribute: [] },
      {
        opType: "Cast",
        input: ["p"],
        output: ["n"],
        attribute: [{ name: "to", type: 2, i: 6 }],
      },
    ],
    initializer: [],
    input: [input("a", 7, [2]), input("b", 7, [2])],
  }, [["q", 7], ["r", 7], ["n", 6]]);
  const gather = model({
    node: [
      { opType: "Mul", input: ["a", "a"], output: ["p"], attribute: [] },
      { opType: "Gather", input: ["t", "p"], output: ["g"], attribute: [] },
    ],
    initializer: [],
    input: [input("a", 7, [2]), input("t", 1, [3])],
  }, [["g", 1]]);
  for (const backend of BACKENDS) {
    const out = await arithmetic.run({ a: i64([100000n, -100000n]), b: i64([-7n, 7n]) }, {
      backend,
    });
    assert.deepEqual([...out.q.data as BigInt64Array], [-1428571428n, 1428571428n], backend);
    assert.deepEqual([...out.r.data as BigInt64Array], [-3n, 4n]);
    assert.deepEqual([...out.n.data], [1410065408, 1410065408]);
    const t = f32([5, 6, 7]);
    assert.deepEqual([...(await gather.run({ a: i64([1n, -1n]), t }, { backend })).g.data], [
      6,
      6,
    ]);
    // 65536² = 2^32 would wrap to index 0, in range: the check refuses it.
    await assert.rejects(() => gather.run({ a: i64([65536n, 1n]), t }, { backend }), refused);
  }
  arithmetic.dispose();
  gather.dispose();
});

Deno.test("int64 constants that wrap when folded are a typed error at import", async () => {
  const m = model({
    node: [
      { opType: "Mul", input: ["k", "k"], output: ["p"], attribute: [] },
      { opType: "Add", input: ["p", "a"], output: ["y"], attribute: [] },
    ],
    initializer: [{ name: "k", dims: [1], dataType: 7, int64Data: [100000] }],
    input: [input("a", 7, [1])],
  }, [["y", 7]]);
  await assert.rejects(
    () => m.run({ a: i64([1n]) }, { backend: "reference" }),
    (e) => e instanceof KilnError && e.code === "out-of-range" && /int64/.test(e.message),
  );
});

Deno.test("INT64_MAX works as a Slice bound after moves, and is refused as a number", async () => {
  const inits = [
    { name: "big", dims: [1], dataType: 7, int64Data: [9223372036854775807n] },
    { name: "start", dims: [1], dataType: 7, int64Data: [1] },
  ];
  // Exporters assemble Slice bounds with Concat/Unsqueeze: the sentinel survives the fold.
  const slice = model({
    node: [
      {
        opType: "Concat",
        input: ["big"],
        output: ["ends"],
        attribute: [{ name: "axis", type: 2, i: 0 }],
      },
      { opType: "Slice", input: ["x", "start", "ends"], output: ["y"], attribute: [] },
    ],
    initializer: inits,
    input: [input("x", 1, [4])],
  }, [["y", 1]]);
  assert.deepEqual([...(await slice.run({ x: f32([1, 2, 3, 4]) }, { backend: "wasm" })).y.data], [
    2,
    3,
    4,
  ]);
  const sentinel = (e: unknown) =>
    e instanceof KilnError && /INT64_MAX or INT64_MIN/.test(e.message);
  for (const opType of ["Neg", "Identity"]) {
    const m = model({
      node: [{ opType, input: ["big"], output: ["y"], attribute: [] }],
      initializer: inits,
      input: [],
    }, [["y", 7]]);
    await assert.rejects(() => m.run({}, { backend: "reference" }), sentinel, opType);
  }
});

Deno.test("int64 constants whose product is too large to fold are still checked where it runs in 32 bits", async () => {
  // [2048, 1] · [1, 1024]: 2M elements, past what the importer folds from 12 KB of constants.
  const m = model({
    node: [
      { opType: "Mul", input: ["k", "l"], output: ["p"], attribute: [] },
      { opType: "Add", input: ["p", "a"], output: ["y"], attribute: [] },
    ],
    initializer: [
      { name: "k", dims: [2048, 1], dataType: 7, int64Data: Array(2048).fill(100000) },
      { name: "l", dims: [1, 1024], dataType: 7, int64Data: Array(1024).fill(100000) },
    ],
    input: [input("a", 7, [1])],
  }, [["y", 7]]);
  await assert.rejects(
    () => m.run({ a: i64([1n]) }, { backend: "wasm" }),
    (e) => e instanceof KilnError && e.code === "out-of-range" && /int64/.test(e.message),
  );
  m.dispose();
});
