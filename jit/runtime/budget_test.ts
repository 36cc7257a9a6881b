import assert from "node:assert/strict";
import {
  checkBudget,
  compile,
  GraphBuilder,
  KilnError,
  MAX_ELEMENTS,
  memoryBudget,
  setMemoryBudget,
} from "../../mod.ts";

const limited = (f: () => unknown) =>
  assert.throws(f, (e) => e instanceof KilnError && e.code === "limit" && /Fix:/.test(e.message));

Deno.test("shapes past the budget are refused when the graph is built, before any allocation", () => {
  // A broadcast reduction over 2^32 points would wrap 32-bit counters; Expand to 2^30 f32 would
  // allocate 4 GiB: both are typed errors in microseconds.
  for (const shape of [[65536, 65537], [65536, 32769], [2 ** 30], [2 ** 40]]) {
    const b = new GraphBuilder();
    const x = b.input("x", [1]);
    const t0 = performance.now();
    limited(() => {
      b.output("y", b.op("ReduceSum", [b.op("Expand", [x], { shape })], { keepdims: 0 }));
      b.build();
    });
    assert.ok(performance.now() - t0 < 1000);
  }
  const b = new GraphBuilder();
  limited(() => {
    b.output("r", b.op("Range", [], { start: 0, limit: 2 ** 31, delta: 1, dtype: "i32" }));
    b.build();
  });
});

Deno.test("the budget is configurable and checked per tensor", async () => {
  const before = memoryBudget().maxTensorBytes;
  assert.ok(before > 0 && before <= 2 ** 31);
  try {
    setMemoryBudget({ maxTensorBytes: 1024 });
    checkBudget([256], "f32", "t");
    limited(() => checkBudget([257], "f32", "t"));
    const b = new GraphBuilder();
    const x = b.input("x", [1]);
    limited(() => {
      b.output("y", b.op("Expand", [x], { shape: [300] }));
      b.build();
    });
    setMemoryBudget(undefined);
    const g = new GraphBuilder();
    g.output("y", g.op("Expand", [g.input("x", [1])], { shape: [300] }));
    const exe = await compile(g.build(), { backend: "wasm" });
    const r = await exe.run({ x: { data: new Float32Array([2]), shape: [1], dtype: "f32" } });
    assert.equal(r.y.data.length, 300);
  } finally {
    setMemoryBudget(undefined);
  }
  assert.equal(memoryBudget().maxTensorBytes, before);
  limited(() => checkBudget([MAX_ELEMENTS + 1], "bool", "t"));
  assert.throws(() => setMemoryBudget({ maxTensorBytes: -1 }), KilnError);
  // Not options, a misspelled one, a byte count as text: each had kept the default silently.
  for (const bad of ["big", { bytes: 5 }, { maxTensorBytes: "1024" }]) {
    assert.throws(() => setMemoryBudget(bad as never), KilnError, JSON.stringify(bad));
  }
  assert.equal(memoryBudget().maxTensorBytes, before);
});

Deno.test("KILN_MAX_TENSOR_BYTES that is not a positive byte count is a typed error", () => {
  const before = Deno.env.get("KILN_MAX_TENSOR_BYTES");
  try {
    for (const raw of ["abc", "-5", "0", "", "1.5", "1e400"]) {
      Deno.env.set("KILN_MAX_TENSOR_BYTES", raw);
      setMemoryBudget(undefined);
      assert.throws(
        () => checkBudget([4], "f32", "x"),
        (e) =>
          e instanceof KilnError && /KILN_MAX_TENSOR_BYTES/.test(e.message) &&
          /Fix:/.test(e.message),
        raw,
      );
    }
    Deno.env.set("KILN_MAX_TENSOR_BYTES", "1048576");
    setMemoryBudget(undefined);
    assert.equal(memoryBudget().maxTensorBytes, 1048576);
    // An explicit budget stands whatever the variable says.
    Deno.env.set("KILN_MAX_TENSOR_BYTES", "abc");
    setMemoryBudget({ maxTensorBytes: 4096 });
    assert.equal(memoryBudget().maxTensorBytes, 4096);
  } finally {
    if (before === undefined) Deno.env.delete("KILN_MAX_TENSOR_BYTES");
    else Deno.env.set("KILN_MAX_TENSOR_BYTES", before);
    setMemoryBudget(undefined);
  }
});

Deno.test("checkBudget of a shape that is not a list of sizes is a typed error", () => {
  // null had failed inside (`null.reduce`); [-4] passed as a small tensor.
  for (const shape of [null, [-4], "4"]) {
    assert.throws(
      () => checkBudget(shape as never, "f32", "x"),
      (e: unknown) => e instanceof KilnError && /x's shape .* not a list of sizes/.test(e.message),
    );
  }
});
