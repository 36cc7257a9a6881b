import assert from "node:assert/strict";
import { KilnError } from "../support/errors.ts";
import { clearRealizeCache, configureTensors, realizeStats } from "./realize.ts";
import { concat, liveTensors, tensor, where } from "./tensor.ts";
import { assertClose, numbers } from "../testing/testing.ts";

Deno.test("chains compute lazily and match plain math", async () => {
  const x = tensor([[1, 2, 3], [4, 5, 6]]);
  const y = x.mul(1.5).add(0.5).relu().mul(x.sigmoid()).sub(x.mul(x).div(8));
  assert.deepEqual(y.shape, [2, 3]);
  const want = [1, 2, 3, 4, 5, 6].map((v) =>
    Math.max(v * 1.5 + 0.5, 0) / (1 + Math.exp(-v)) - (v * v) / 8
  );
  assertClose(numbers(await y.data()), want, { rtol: 1e-6 });
  assert.deepEqual(await tensor([[1, 2], [3, 4]]).sum(-1).array(), [3, 7]);
  assertClose(numbers(await x.matmul(x.transpose()).data()), [14, 32, 32, 77]);
  assertClose(numbers(await x.softmax(-1).sum(-1).data()), [1, 1]);
});

Deno.test("an identical chain over new data does not recompile", async () => {
  clearRealizeCache();
  const run = (seed: number) => tensor([seed, seed + 1, seed + 2]).mul(2).add(1).exp().sum(-1);
  await run(1).data();
  const after = realizeStats();
  assert.equal(after.misses, 1);
  const v = await run(5).data();
  assert.equal(realizeStats().misses, 1);
  assert.equal(realizeStats().hits, 1);
  assertClose(numbers(v), [[5, 6, 7].reduce((s, t) => s + Math.exp(2 * t + 1), 0)], { rtol: 1e-6 });
  // A different scalar value is data, not structure: still no recompile.
  await tensor([1, 2, 3]).mul(3).add(1).exp().sum(-1).data();
  assert.equal(realizeStats().misses, 1);
  // A different structure compiles.
  await tensor([1, 2, 3]).mul(3).add(1).exp().max(-1).data();
  assert.equal(realizeStats().misses, 2);
});

Deno.test("realized values are reused by later chains", async () => {
  clearRealizeCache();
  const h = tensor([1, 2, 3]).exp();
  await h.data();
  await h.add(1).data();
  assert.equal(realizeStats().misses, 2);
  // h.add(1) read h's data as an input (no Exp), so it is isomorphic to a plain leaf + 1.
  assertClose(numbers(await tensor([5, 6, 7]).add(1).data()), [6, 7, 8]);
  assert.equal(realizeStats().misses, 2);
  assert.equal(realizeStats().hits, 1);
});

Deno.test("leak checks: dispose, using, and derived tensors outliving their inputs", async () => {
  // Only this test's tensors are counted: the FinalizationRegistry may collect others meanwhile.
  const live = (ids: number[]) => liveTensors().filter((t) => ids.includes(t.id)).length;
  const a = tensor([1, 2, 3]);
  const b = a.mul(2);
  assert.equal(live([a.id, b.id]), 2);
  a.dispose();
  assertClose(numbers(await b.data()), [2, 4, 6]);
  assert.equal(live([a.id, b.id]), 1);
  b.dispose();
  assert.equal(live([a.id, b.id]), 0);
  const ids: number[] = [];
  {
    using c = tensor([1]);
    using d = c.neg();
    ids.push(c.id, d.id);
    assert.equal(live(ids), 2);
    await d.data();
  }
  assert.equal(live(ids), 0);
  const described = tensor([1]).exp();
  assert.deepEqual(liveTensors().find((t) => t.id === described.id), {
    id: described.id,
    shape: [1],
    dtype: "f32",
    origin: "Exp",
  });
  described.dispose();
});

Deno.test("using a disposed tensor is a clear error", () => {
  const a = tensor([1, 2]);
  a.dispose();
  assert.ok(a.disposed);
  assert.throws(
    () => a.add(1),
    (e: unknown) => e instanceof KilnError && e.code === "disposed" && /Fix: /.test(e.message),
  );
});

Deno.test("op errors are raised at the call, not at data()", () => {
  const a = tensor([[1, 2, 3]]);
  assert.throws(
    () => a.add(tensor([1, 2])),
    (e: unknown) =>
      e instanceof KilnError && e.code === "shape-mismatch" && /Tensor\.Add/.test(e.message),
  );
  assert.throws(
    () => a.softmax(3),
    (e: unknown) => e instanceof KilnError && e.code === "bad-axis",
  );
  assert.throws(
    () => tensor([1, 2, 3], [2, 2]),
    (e: unknown) => e instanceof KilnError && /needs 4 elements/.test(e.message),
  );
  assert.throws(
    () => tensor(["a"] as unknown as number[]),
    (e: unknown) => e instanceof KilnError && e.code === "bad-input",
  );
  // Operands and attributes of the wrong kind: a string had made NaN (null 0), a string
  // attribute had been taken as unset.
  for (const other of ["x", null, {}]) {
    assert.throws(
      () => a.add(other as unknown as number),
      (e: unknown) => e instanceof KilnError && /an operand is .*, not a Tensor/.test(e.message),
      String(other),
    );
  }
  for (const bad of [5, { backend: "wasm", maxEntry: 2 }, { maxEntries: 0 }]) {
    assert.throws(() => configureTensors(bad as never), KilnError, JSON.stringify(bad));
  }
  assert.throws(
    () => a.leakyRelu("0.1" as unknown as number),
    (e: unknown) => e instanceof KilnError && /alpha must be a number, got "0.1"/.test(e.message),
  );
});

Deno.test("dtypes: bool from booleans, typed arrays keep theirs, integer math, where", async () => {
  const mask = tensor([true, false, true]);
  assert.equal(mask.dtype, "bool");
  assertClose(numbers(await where(mask, tensor([1, 2, 3]), 0).data()), [1, 0, 3]);
  const ints = tensor(new Int32Array([7, -7]));
  assert.equal(ints.dtype, "i32");
  assert.deepEqual(numbers(await ints.div(2).data()), [3, -3]);
  assert.deepEqual(numbers(await tensor([1.7, -1.7]).cast("i32").data()), [1, -1]);
  assert.deepEqual(numbers(await tensor([0.5, 2]).cast("f16").mul(2).cast("f32").data()), [1, 4]);
  assert.deepEqual(numbers(await tensor([3, 9, 1]).argmax().data()), [1]);
  const [p, q] = tensor([1, 2, 3, 4]).split([1, 3]);
  assert.deepEqual(numbers(await concat([q, p]).data()), [2, 3, 4, 1]);
  assert.deepEqual(
    numbers(await tensor([[1, 2], [3, 4]]).gather(tensor(new Int32Array([1]))).data()),
    [3, 4],
  );
});

Deno.test("data() returns a copy the caller may change", async () => {
  const t = tensor([1, 2]).add(1);
  const d = await t.data();
  (d as Float32Array)[0] = 100;
  assertClose(numbers(await t.data()), [2, 3]);
});

Deno.test("configureTensors refuses unknown backends", () => {
  assert.throws(
    () => configureTensors({ backend: "nope" }),
    (e: unknown) => e instanceof KilnError && /No backend "nope"/.test(e.message),
  );
});

Deno.test("a chain of thousands of lazy ops realizes, as the same chain through GraphBuilder", async () => {
  let x = tensor([1, 2, 3, 4]);
  for (let i = 0; i < 6000; i++) x = i % 2 ? x.mul(1) : x.add(0);
  assert.deepEqual([...await x.data()], [1, 2, 3, 4]);
});

Deno.test("numbers an integer tensor cannot hold are typed errors, not wrapped values", () => {
  const refused = (e: unknown) =>
    e instanceof KilnError && e.code === "out-of-range" && /Fix:/.test(e.message);
  assert.throws(() => tensor([3e10], undefined, "i32"), refused);
  assert.throws(() => tensor([-1], undefined, "u8"), refused);
  assert.throws(() => tensor([NaN], undefined, "i16"), refused);
  assert.throws(() => tensor([1, 2], undefined, "i32").add(2 ** 31), refused);
  assert.deepEqual([...tensor([2 ** 31 - 1, -(2 ** 31)], undefined, "i32").shape], [2]);
});

Deno.test("concat and where refuse what is not a Tensor as typed errors", () => {
  const typed = (pattern: RegExp) => (e: unknown) =>
    e instanceof KilnError && e.code === "bad-input" && pattern.test(e.message);
  // Each had failed inside (a private field read of a non-Tensor, `null.where`) as a TypeError.
  assert.throws(() => concat(null as never), typed(/Concat takes a list of Tensors, got null/));
  const a = tensor([1, 2]);
  assert.throws(() => concat([a, [3] as never]), typed(/got \[3\] at 1/));
  assert.throws(() => where(null as never, a, 0), typed(/where\(\) takes a bool Tensor/));
  assert.equal(concat([a, a]).shape[0], 4);
});

Deno.test("cumsum and layerNorm refuse options they do not have", () => {
  const t = tensor([[1, 2], [3, 4]]);
  const typed = (pattern: RegExp) => (e: unknown) =>
    e instanceof KilnError && e.code === "bad-input" && pattern.test(e.message);
  // Each had computed with its defaults: an inclusive sum, epsilon 1e-5.
  assert.throws(() => t.cumsum(0, { excl: true } as never), typed(/cumsum has no option "excl"/));
  assert.throws(() => t.cumsum(0, 5 as never), typed(/object of options/));
  const scale = tensor([1, 1]);
  assert.throws(() => t.layerNorm(scale, undefined, { eps: 1 } as never), typed(/"eps"/));
  assert.ok(t.layerNorm(scale, undefined, { epsilon: 1e-3 }));
  // A keepdims that is not a boolean had become NaN, reported as "got null".
  assert.throws(() => t.sum(0, "yes" as never), typed(/keepdims is "yes", not true or false/));
  assert.throws(() => t.argmax(0, 1 as never), typed(/ArgMax: keepdims is 1/));
  assert.deepEqual(t.sum(0, true).shape, [1, 2]);
});
