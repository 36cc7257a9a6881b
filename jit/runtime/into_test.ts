import assert from "node:assert/strict";
import { compile, GraphBuilder, KilnError, WasmBackend, WebGpuBackend } from "../../mod.ts";
import type { AssemblyPlan, Program } from "./backend.ts";

function graph() {
  const b = new GraphBuilder();
  const x = b.input("x", [4]);
  b.output("y", b.op("Mul", [x, b.constant(2)]));
  b.output("n", b.op("Cast", [b.op("Greater", [x, b.constant(0)])], { to: "i32" }));
  return b.build();
}

Deno.test("run fills the caller's buffers, and refuses wrong ones before running", async () => {
  for (const backend of ["reference", "wasm", "webgpu"]) {
    using exe = await compile(graph(), { backend, cache: false });
    const x = { data: Float32Array.from([-1, 0, 1, 2]), shape: [4], dtype: "f32" as const };
    const y = new Float32Array(4), n = new Int32Array(4);
    const out = await exe.run({ x }, { into: { y, n } });
    assert.equal(out.y.data, y, `${backend}: the caller's y`);
    assert.deepEqual([...y], [-2, 0, 2, 4]);
    assert.deepEqual([...n], [0, 0, 1, 1]);
    // Two outputs on the same bytes (y's values had been lost to n's).
    const shared = new ArrayBuffer(32);
    const wrong: Record<string, Float32Array | Int32Array>[] = [
      { y: new Float32Array(3) },
      { y: new Int32Array(4) },
      { z: new Float32Array(4) },
      { y: new Float32Array(shared, 0, 4), n: new Int32Array(shared, 12, 4) },
    ];
    for (const into of wrong) {
      const mine = Object.values(into)[0];
      mine.fill(7);
      await assert.rejects(
        async () => await exe.run({ x }, { into }),
        (e: unknown) =>
          e instanceof KilnError && /^into\./.test(e.message) && /Fix:/.test(e.message),
      );
      assert.ok([...mine].every((v) => v === 7), "the caller's buffer is untouched");
    }
    // Apart in one memory: fine.
    const whole = new ArrayBuffer(32);
    const [ya, na] = [new Float32Array(whole, 0, 4), new Int32Array(whole, 16, 4)];
    await exe.run({ x }, { into: { y: ya, n: na } });
    assert.deepEqual([...ya, ...na], [-2, 0, 2, 4, 0, 0, 1, 1]);
    // Not a map, and names not in a list: typed, where they had been ignored or a TypeError.
    for (const options of [{ into: 5 }, { outputs: "y" }]) {
      await assert.rejects(
        async () => await exe.run({ x }, options as never),
        (e: unknown) => e instanceof KilnError && /not a (map|list)/.test(e.message),
      );
    }
    // A misspelt option had read back every output; a number of options had been ignored.
    for (const [options, pattern] of [[{ outputz: ["y"] }, /no option "outputz"/], [5, /got 5/]]) {
      assert.throws(
        () => exe.run({ x }, options as never),
        (e: unknown) => e instanceof KilnError && (pattern as RegExp).test(e.message),
      );
      assert.throws(() => exe.runOnDevice({ x }, options as never), KilnError);
    }
  }
});

Deno.test("a device tensor reads into the caller's buffer", async () => {
  using exe = await compile(graph(), { backend: "webgpu", cache: false });
  const x = { data: Float32Array.from([1, 2, 3, 4]), shape: [4], dtype: "f32" as const };
  const { y, n } = await exe.runOnDevice({ x });
  // The storage's read fills the caller's array itself (no fresh array copied over).
  const storage = y.storage();
  const read = storage.read.bind(storage);
  const filled: boolean[] = [];
  storage.read = async (offset, length, into) => {
    const data = await read(offset, length, into);
    filled.push(into !== undefined && data === into);
    return data;
  };
  const mine = new Float32Array(2);
  const got = await y.read({ offset: 1, length: 2 }, { into: mine });
  assert.equal(got.data, mine);
  assert.deepEqual([...mine], [4, 6]);
  // A longer array: its front is filled, the rest left as it was.
  const longer = new Float32Array(4).fill(9);
  assert.equal((await y.read({ length: 3 }, { into: longer })).data, longer);
  assert.deepEqual([...longer], [2, 4, 6, 9]);
  assert.deepEqual(filled, [true, true]);
  assert.throws(() => y.read({}, { into: new Float32Array(2) }), KilnError);
  // A range that is not one: a string's length had been read as the range's length.
  for (const bad of ["ab", { offset: 1, count: 2 }]) {
    assert.throws(() => y.read(bad as never), KilnError, JSON.stringify(bad));
  }
  y.dispose();
  n.dispose();
});

Deno.test("wasm and webgpu read outputs straight into the caller's buffers, no fresh array", async () => {
  for (const backend of [new WasmBackend({ threads: 1, warmUpMs: 0 }), new WebGpuBackend()]) {
    // What the program hands back for each output: the caller's own array, not a copy of it.
    const handed: unknown[] = [];
    const codegen = backend.codegen;
    const assemble = codegen.assemble!.bind(codegen);
    codegen.assemble = async (plan: AssemblyPlan): Promise<Program> => {
      const program = await assemble(plan);
      const run = program.run.bind(program);
      program.run = async (...call: Parameters<Program["run"]>) => {
        const data = await run(...call);
        handed.push(...data.map((d, i) => d === call[3]?.[i]));
        return data;
      };
      return program;
    };
    using exe = await compile(graph(), { backend, cache: false });
    const x = { data: Float32Array.from([-1, 0, 1, 2]), shape: [4], dtype: "f32" as const };
    const y = new Float32Array(6).fill(9), n = new Int32Array(4);
    const out = await exe.run({ x }, { into: { y, n } });
    assert.deepEqual(handed, [true, true], backend.id);
    assert.equal(out.y.data, y);
    // The front is the output; the rest of a longer buffer is left as it was.
    assert.deepEqual([...y], [-2, 0, 2, 4, 9, 9]);
    assert.deepEqual([...n], [0, 0, 1, 1]);
    // Without `into`, fresh arrays as before.
    const fresh = await exe.run({ x });
    assert.notEqual(fresh.y.data, y);
    assert.deepEqual([...fresh.y.data], [-2, 0, 2, 4]);
    backend.dispose();
  }
});
