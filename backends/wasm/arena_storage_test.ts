import assert from "node:assert/strict";
import { compile, DeviceTensor, GraphBuilder, KilnError, stats, WasmBackend } from "../../mod.ts";
import type { DeviceStorage } from "../../jit/runtime/device_tensor.ts";

const f32 = (values: number[]) => ({
  data: Float32Array.from(values),
  shape: [values.length],
  dtype: "f32" as const,
});

/** next = s · 2 + x over 4 elements, and its sum (a small output beside the large one). */
async function stepper(threads = 1) {
  const b = new GraphBuilder();
  const s = b.input("s", [4]), x = b.input("x", [4]);
  const next = b.op("Add", [b.op("Mul", [s, b.constant(2)]), x]);
  b.output("next", next);
  b.output("sum", b.op("ReduceSum", [next], { keepdims: 0 }));
  return await compile(b.build(), { backend: new WasmBackend({ threads }), cache: false });
}

const values = async (t: DeviceTensor) => Array.from((await t.read()).data as Float32Array);

Deno.test("a wasm run leaves its outputs in the arena, and the next run takes them without the host", async () => {
  using exe = await stepper();
  const x = f32([1, 2, 3, 4]);
  let { next } = await exe.runOnDevice({ s: f32([0, 0, 0, 0]), x });
  assert.equal(next.backend, "wasm");
  await exe.warmUp();
  const before = stats();
  for (let i = 0; i < 3; i++) {
    const out = await exe.runOnDevice({ s: next, x }, { outputs: ["next"] });
    next.dispose();
    next = out.next;
  }
  const after = stats();
  assert.equal(after.kiln_bytes_downloaded_total, before.kiln_bytes_downloaded_total);
  assert.equal(
    after.kiln_wasm_host_bytes_total - before.kiln_wasm_host_bytes_total,
    3 * 16,
    "only x went in; nothing came out",
  );
  // s = 0 → x → 3x → 7x → 15x.
  assert.deepEqual(await values(next), [15, 30, 45, 60]);
  next.dispose();
});

Deno.test("a wasm device tensor kept while later runs write its place still reads its own values", async () => {
  using exe = await stepper();
  const x = f32([1, 1, 1, 1]);
  const first = (await exe.runOnDevice({ s: f32([1, 2, 3, 4]), x })).next;
  const second = (await exe.runOnDevice({ s: first, x })).next;
  const third = (await exe.runOnDevice({ s: f32([0, 0, 0, 0]), x })).next;
  assert.deepEqual(await values(first), [3, 5, 7, 9]);
  assert.deepEqual(await values(second), [7, 11, 15, 19]);
  assert.deepEqual(await values(third), [1, 1, 1, 1]);
  // Fed to the run again after it moved out: the same values go back in.
  const again = (await exe.runOnDevice({ s: first, x })).next;
  assert.deepEqual(await values(again), [7, 11, 15, 19]);
  // And a host run in between leaves it alone.
  assert.deepEqual(
    Array.from((await exe.run({ s: f32([1, 1, 1, 1]), x })).next.data as Float32Array),
    [3, 3, 3, 3],
  );
  assert.deepEqual(await values(again), [7, 11, 15, 19]);
  for (const t of [first, second, third, again]) t.dispose();
  await assert.rejects(values(first), (e: unknown) => e instanceof KilnError);
});

Deno.test("a wasm device tensor feeds another wasm program, threaded or not, and outlives its own", async () => {
  const exe = await stepper();
  using other = await stepper(2);
  const x = f32([1, 2, 3, 4]);
  const out = await exe.runOnDevice({ s: f32([1, 1, 1, 1]), x });
  exe.dispose();
  assert.deepEqual(await values(out.next), [3, 4, 5, 6], "readable after its program is gone");
  const { next, sum } = await other.runOnDevice({ s: out.next, x });
  assert.deepEqual(await values(next), [7, 10, 13, 16]);
  assert.equal((await sum.read()).data[0], 46);
  const host = await other.run({ s: next, x });
  assert.deepEqual(Array.from(host.next.data as Float32Array), [15, 22, 29, 36]);
  for (const t of [out.next, out.sum, next, sum]) t.dispose();
});

Deno.test("wasm allocates device tensors, repeats with state in its arena, and takes another backend's through the host", async () => {
  const wasm = new WasmBackend({ threads: 1 });
  using s = await DeviceTensor.allocate(wasm, [4]);
  s.write(new Float32Array([1, 0, 0, 1]));
  // Neither an array nor a tensor had failed inside (`null.shape`).
  assert.throws(() => s.write(null as never), KilnError);
  using exe = await stepper();
  const x = f32([0, 1, 0, 0]);
  using next = (await exe.runOnDevice({ s, x })).next;
  assert.deepEqual(await values(next), [2, 1, 0, 2]);
  assert.deepEqual(await values(s), [1, 0, 0, 1], "an argument is not written");

  const b = new GraphBuilder();
  b.output("out", b.op("Add", [b.input("acc", [2]), b.input("step", [2])]));
  using loop = await compile(b.build(), { backend: wasm, cache: false, state: { out: "acc" } });
  const r = await loop.run({ acc: f32([1, 2]), step: f32([10, 20]) }, { repeat: 4 });
  assert.deepEqual(Array.from(r.out.data as Float32Array), [41, 82]);

  // Another backend's device tensor comes to the host first, a transfer.
  const foreign: DeviceStorage = {
    backend: "elsewhere",
    read: () => Promise.resolve(new Float32Array([1, 2, 3, 4])),
    write: () => {},
    release: () => {},
  };
  const transfers = stats().kiln_transfers_total;
  const out = await exe.runOnDevice({ s: new DeviceTensor(foreign, [4], "f32"), x });
  assert.equal(stats().kiln_transfers_total - transfers, 1);
  assert.deepEqual(await values(out.next), [2, 5, 6, 8]);
  out.next.dispose();
  out.sum.dispose();
});
