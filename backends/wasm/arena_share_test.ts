import assert from "node:assert/strict";
import { compile, GraphBuilder, stats, WasmBackend } from "../../mod.ts";
import { uniform } from "../../jit/support/random.ts";
import { FAULT_BYTES } from "./arena_layout.ts";
import { ArenaShare, type FixedValue } from "./arena_share.ts";

const fixed = (data: Float32Array): FixedValue => ({
  data,
  dtype: "f32",
  bytes: data.byteLength,
  held: false,
});

Deno.test("a share places the same bytes once, apart from each tenant's region, and frees them at the end", () => {
  const share = new ArenaShare(false);
  const w = new Float32Array(1000), v = new Float32Array(8);
  const a = share.lease(new Map([[1, fixed(w)], [2, fixed(v)]]), () => 256)!;
  const b = share.lease(new Map([[7, fixed(w)], [8, fixed(w.subarray(0, 8))]]), () => 128)!;
  assert.equal(a.memory, b.memory);
  assert.equal(b.places.get(7), a.places.get(1), "one place for the same view");
  assert.notEqual(b.places.get(8)!.at, a.places.get(1)!.at, "another view, another place");
  const spans = [
    ...[...a.places.values(), b.places.get(8)!].map((p) => [p.at, p.at + p.bytes]),
    [a.base, a.base + 256],
    [b.base, b.base + 128],
  ].sort((x, y) => x[0] - y[0]);
  assert.ok(spans[0][0] >= FAULT_BYTES, "after the fault record");
  spans.slice(1).forEach((s, i) => assert.ok(s[0] >= spans[i][1], "no two overlap"));
  assert.ok(a.memory.buffer.byteLength >= Math.max(...spans.map((s) => s[1])));
  // Two values of one tenant over the same bytes: the second stays in its region.
  const c = share.lease(new Map([[1, fixed(v)], [2, fixed(v)]]), (places) => {
    assert.deepEqual([...places.keys()], [1]);
    return 16;
  })!;
  assert.equal(c.places.get(1), a.places.get(2));
  a.end();
  a.end();
  assert.equal(b.places.get(7)!.users, 1, "b still reads w's place");
  b.end();
  c.end();
  assert.equal(share.top, FAULT_BYTES, "every byte given back");
  // A region past what wasm addresses is refused, and nothing is kept for it.
  assert.equal(share.lease(new Map([[1, fixed(w)]]), () => 2 ** 32), undefined);
  assert.equal(share.top, FAULT_BYTES);
});

Deno.test("a share hands a freed range to the next tenant that fits it", () => {
  const share = new ArenaShare(false);
  const a = share.lease(new Map(), () => 1024)!, b = share.lease(new Map(), () => 64)!;
  a.end();
  const c = share.lease(new Map(), () => 512)!;
  assert.equal(c.base, a.base);
  assert.ok(share.top === b.base + 64);
});

const V = 512, D = 64;

/** y = E[ids] + bias over four ids: E a param (an embedding), bias a constant. */
function lookup(table: Float32Array, bias: Float32Array) {
  const b = new GraphBuilder();
  const ids = b.input("ids", [4], "i32");
  const e = b.op("Gather", [b.param("E", [V, D], "f32", table), ids]);
  b.output("y", b.op("Add", [e, b.constant(bias, [D])]));
  return b.build();
}

/** The reference: E[ids] + bias. */
function expected(table: Float32Array, bias: Float32Array, ids: number[]): number[] {
  return ids.flatMap((i) =>
    Array.from(table.subarray(i * D, (i + 1) * D), (x, j) => Math.fround(x + bias[j]))
  );
}

for (const threads of [1, 2]) {
  Deno.test(`programs of one graph on ${threads} thread(s) hold its weights once; a param changed in one stays its own`, async () => {
    const backend = new WasmBackend({ threads });
    const table = uniform(V * D, 1), bias = uniform(D, 2);
    const graph = lookup(table, bias);
    using a = await compile(graph, { backend, cache: false });
    using b = await compile(graph, { backend, cache: false });
    const ids = (xs: number[]) => ({
      ids: { data: Int32Array.from(xs), shape: [xs.length], dtype: "i32" as const },
    });
    const y = async (exe: typeof a, xs: number[]) =>
      Array.from((await exe.run(ids(xs))).y.data as Float32Array);
    assert.deepEqual(await y(a, [0, 5, 511, 7]), expected(table, bias, [0, 5, 511, 7]));
    const before = stats().kiln_wasm_host_bytes_total;
    assert.deepEqual(await y(b, [9, 8, 7, 6]), expected(table, bias, [9, 8, 7, 6]));
    const moved = stats().kiln_wasm_host_bytes_total - before;
    assert.ok(moved < table.byteLength, `${moved} bytes: the table was written again`);
    // One executable's new table is written over the shared place; the other's written back.
    const other = uniform(V * D, 3);
    b.setParam("E", other);
    assert.deepEqual(await y(b, [9, 1, 2, 3]), expected(other, bias, [9, 1, 2, 3]));
    assert.deepEqual(await y(a, [1, 2, 3, 4]), expected(table, bias, [1, 2, 3, 4]));
    assert.deepEqual(await y(b, [10, 0, 0, 1]), expected(other, bias, [10, 0, 0, 1]));
    // Outputs left in the memory: a's moves out as a goes, b's stays where c cannot write.
    const keptA = (await a.runOnDevice(ids([4, 4, 4, 4]))).y;
    const keptB = (await b.runOnDevice(ids([5, 6, 7, 8]))).y;
    // A program compiled after another is gone takes its places.
    a[Symbol.dispose]();
    using c = await compile(graph, { backend, cache: false });
    assert.deepEqual(await y(c, [3, 300, 2, 1]), expected(table, bias, [3, 300, 2, 1]));
    const read = async (t: typeof keptA) => Array.from((await t.read()).data as Float32Array);
    assert.deepEqual(await read(keptA), expected(table, bias, [4, 4, 4, 4]));
    assert.deepEqual(await read(keptB), expected(other, bias, [5, 6, 7, 8]));
    assert.deepEqual(await y(b, [11, 12, 13, 14]), expected(other, bias, [11, 12, 13, 14]));
    keptA.dispose();
    keptB.dispose();
  });
}
