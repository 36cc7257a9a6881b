import assert from "node:assert/strict";
import { compile } from "../compile.ts";
import { GraphBuilder } from "../frontend/graph_builder.ts";
import { KilnError } from "../support/errors.ts";
import { lowerInt64 } from "./int64.ts";
import "../../mod.ts";

/** x (i32) cast to i64, squared, summed, divided, its remainder, cast back to i32 (wrapping). */
function arithmetic() {
  const b = new GraphBuilder();
  const x = b.input("x", [3], "i32");
  const w = b.op("Cast", [x], { to: "i64" });
  const p = b.op("Mul", [w, w]);
  const negated = b.op("Cast", [b.op("Neg", [x])], { to: "i64" });
  b.output("p", p, { dtype: "i64" });
  b.output("s", b.op("ReduceSum", [p], { keepdims: 0 }), { dtype: "i64" });
  b.output("d", b.op("Div", [p, negated]), { dtype: "i64" });
  b.output("m", b.op("Mod", [b.op("Neg", [p]), b.op("Add", [w, w])]), { dtype: "i64" });
  b.output("n", b.op("Cast", [p], { to: "i32" }));
  b.output("f", b.op("Cast", [p], { to: "f32" }));
  return b.build();
}

const x = (values: number[]) => ({
  x: { data: Int32Array.from(values), shape: [values.length], dtype: "i32" as const },
});

Deno.test("a graph without i64 lowers to itself; with one, no i64 value is left", () => {
  const b = new GraphBuilder();
  b.output("y", b.op("Add", [b.input("x", [2], "i32"), b.input("z", [2], "i32")]));
  const plain = b.build();
  assert.equal(lowerInt64(plain, "f64"), plain);
  for (const mode of ["f64", "i32"] as const) {
    const lowered = lowerInt64(arithmetic(), mode);
    assert.ok(!lowered.values.some((v) => v.dtype === "i64"), mode);
    assert.ok(lowered.outputs.some((o) => o.name.startsWith("kiln.check:")), mode);
  }
});

Deno.test("int64 in f64 is exact past 2^31 on the reference and wasm: sums, truncating division, Mod, wrapping casts", async () => {
  const graph = arithmetic();
  for (const backend of ["reference", "wasm"]) {
    using exe = await compile(graph, { backend });
    const out = await exe.run(x([100000, -7, 3]));
    const big = (k: string) => [...out[k].data as BigInt64Array];
    assert.deepEqual(big("p"), [10000000000n, 49n, 9n], backend);
    assert.deepEqual(big("s"), [10000000058n]);
    assert.deepEqual(big("d"), [-100000n, 7n, -3n]);
    // −p mod 2w takes the divisor's sign: −10^10 mod 200000 = 0, −49 mod −14 = −7, −9 mod 6 = 3.
    assert.deepEqual(big("m"), [0n, -7n, 3n]);
    assert.deepEqual([...out.n.data], [1410065408, 49, 9]);
    assert.deepEqual([...out.f.data], [1e10, 49, 9]);
  }
});

Deno.test("int64 past 2^53 in f64, or a division by zero, is a typed error, never a rounded value", async () => {
  const graph = arithmetic();
  using exe = await compile(graph, { backend: "wasm" });
  // 2^31 − 1 squared is past 2^53.
  await assert.rejects(
    async () => await exe.run(x([2147483647, 1, 1])),
    (e) => e instanceof KilnError && e.code === "out-of-range" && /2\^53/.test(e.message),
  );
  // x = 0: p / −x divides by zero.
  await assert.rejects(async () => await exe.run(x([0, 1, 1])), (e) => e instanceof KilnError);
});

Deno.test("int64 held in i32 (WebGPU's lowering) answers in range and refuses a wrap", async () => {
  const graph = lowerInt64(arithmetic(), "i32");
  using exe = await compile(graph, { backend: "reference" });
  const out = await exe.run(x([1000, -7, 3]));
  assert.deepEqual([...out.p.data as BigInt64Array], [1000000n, 49n, 9n]);
  assert.deepEqual([...out.d.data as BigInt64Array], [-1000n, 7n, -3n]);
  await assert.rejects(
    async () => await exe.run(x([100000, 1, 1])),
    (e) =>
      e instanceof KilnError && e.code === "out-of-range" && /32-bit range/.test(e.message) &&
      /Fix:/.test(e.message),
  );
});

Deno.test("a graph's own i64 inputs: their sums and products compute in 64 bits, and a result read in 32 is checked", async () => {
  const b = new GraphBuilder();
  const a = b.input("a", [2], "i64"), c = b.input("c", [2], "i64");
  const product = b.op("Mul", [a, c]);
  b.output("q", b.op("Sub", [product, c]), { dtype: "i64" });
  b.output("g", b.op("Gather", [b.constant(Float32Array.of(1, 2, 3)), b.op("Sub", [c, a])]));
  b.output("f", b.op("Cast", [product], { to: "f64" }));
  const exact = b.build();
  b.output("p", product);
  const narrow = b.build();
  const i64 = (v: bigint[]) => ({
    data: BigInt64Array.from(v),
    shape: [v.length],
    dtype: "i64" as const,
  });
  const big = { a: i64([100000n, 0n]), c: i64([100000n, 1n]) };
  for (const backend of ["reference", "wasm"]) {
    using e = await compile(exact, { backend });
    const out = await e.run(big);
    assert.deepEqual([...out.q.data as BigInt64Array], [9999900000n, -1n], backend);
    assert.deepEqual([...out.g.data], [1, 2]);
    // A cast reads the 64-bit product, not one narrowed to 32 bits.
    assert.deepEqual([...out.f.data], [1e10, 0]);
    using n = await compile(narrow, { backend });
    // The product, an i32 output, does not fit: refused, where it wrapped before.
    await assert.rejects(
      async () => await n.run(big),
      (e) => e instanceof KilnError && e.code === "out-of-range" && /Mul/.test(e.message),
    );
    const small = await n.run({ a: i64([3n, 0n]), c: i64([4n, 1n]) });
    assert.deepEqual([...small.p.data], [12, 0]);
  }
});

Deno.test("a check of one value is read as it is; a check of many is reduced to one flag", async () => {
  const producers = (rows: number) => {
    const b = new GraphBuilder();
    const sum = b.op("ReduceSum", [b.input("a", [rows, 3], "i64")], { axes: [1], keepdims: 0 });
    // A Reshape reads the sum in 32 bits: narrowed there, and checked.
    b.output("y", b.op("Reshape", [sum], { shape: [rows] }));
    const lowered = lowerInt64(b.build(), "i32");
    const checks = lowered.outputs.filter((o) => o.name.startsWith("kiln.check:"));
    assert.equal(checks.length, 1);
    return { lowered, op: lowered.nodes.find((n) => n.outputs.includes(checks[0].value))!.op };
  };
  // One flag: no reduction of one value (a kernel of its own every run on a GPU).
  assert.equal(producers(1).op, "Cast");
  assert.equal(producers(4).op, "ReduceMax");
  const a = (v: bigint[]) => ({
    a: { data: BigInt64Array.from(v), shape: [1, 3], dtype: "i64" as const },
  });
  using exe = await compile(producers(1).lowered, { backend: "reference" });
  assert.deepEqual([...(await exe.run(a([1n, 2n, 3n]))).y.data], [6]);
  await assert.rejects(
    async () => await exe.run(a([2000000000n, 2000000000n, 0n])),
    (e) => e instanceof KilnError && e.code === "out-of-range",
  );
});
