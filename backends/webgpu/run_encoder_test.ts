/**
 * Runs of many kernels are submitted in parts (`run_encoder.ts`): the parts are submitted in
 * order and the answer is the one a single submit gives; a run is whole while a read is in flight.
 * On the software adapter in CI.
 */
import assert from "node:assert/strict";
import { compile, DeviceTensor } from "../../mod.ts";
import { GraphBuilder } from "../../jit/frontend/graph_builder.ts";
import { f32, numbers } from "../../jit/testing/testing.ts";
import { WebGpuBackend } from "./webgpu_backend.ts";
import { RunEncoder, SPLIT_FROM } from "./run_encoder.ts";
import { readsPending } from "./gpu_storage.ts";

const gpu = new WebGpuBackend();

/** `n` products in a chain, x · W each (W = [[1, 1], [0, 1]]): a kernel each. */
async function chain(n: number) {
  const b = new GraphBuilder();
  let x = b.input("x", [1, 2]);
  const w = b.constant(new Float32Array([1, 1, 0, 1]), [2, 2]);
  for (let i = 0; i < n; i++) x = b.op("MatMul", [x, w]);
  b.output("y", x);
  return await compile(b.build(), { backend: gpu, cache: false });
}

/** The run's submits, counted while `body` runs. */
async function submits(body: () => Promise<unknown>): Promise<number> {
  const queue = gpu.device!.queue;
  const submit = queue.submit;
  let count = 0;
  queue.submit = (buffers) => (count++, submit.call(queue, buffers));
  try {
    await body();
  } finally {
    queue.submit = submit;
  }
  return count;
}

Deno.test("a run of many kernels is submitted in parts, in order", async () => {
  const n = 60;
  const exe = await chain(n);
  assert.ok(exe.plan!.kernels.length >= n, `${exe.plan!.kernels.length} kernels`);
  let out: number[] = [];
  // [a, b] · W = [a, a + b]: after n products [a, b + n·a].
  const parts = await submits(async () =>
    out = numbers((await exe.run({ x: f32([1, 1], [1, 2]) })).y.data)
  );
  assert.deepEqual(out, [1, 1 + n]);
  assert.equal(parts, 4);
  const twice = await submits(async () => {
    const y = (await exe.run({ x: f32([2, 0], [1, 2]) }, { repeat: 2 })).y.data;
    assert.deepEqual(numbers(y), [2, 2 * n]);
  });
  assert.equal(twice, 5, "parts after 4, 16, 48 and 112 of the repetitions' 120 dispatches");
});

Deno.test("a run of few kernels is submitted once", async () => {
  const exe = await chain(SPLIT_FROM - 8);
  const parts = await submits(async () => await exe.run({ x: f32([1, 1], [1, 2]) }));
  assert.equal(parts, 1);
});

/** Parts a RunEncoder of 60 kernels submits over 60 dispatches (without the final submit). */
function partsOf(encoder: RunEncoder): number {
  let parts = 0;
  let pass = encoder.encoder.beginComputePass();
  for (let i = 0; i < 60; i++) {
    if (encoder.dispatched(pass)) {
      parts++;
      pass = encoder.encoder.beginComputePass();
    }
  }
  pass.end();
  encoder.submit();
  return parts;
}

Deno.test("a run is submitted whole while a read is in flight on the device", async () => {
  const device = (await gpu.prepare(), gpu.device!);
  const b = new GraphBuilder();
  b.output("y", b.op("Add", [b.input("x", [4]), b.constant(1)]));
  const exe = await compile(b.build(), { backend: gpu, cache: false });
  const { y } = await exe.runOnDevice({ x: f32([1, 2, 3, 4], [4]) });
  assert.ok(y instanceof DeviceTensor);
  await y.read(); // a staging buffer pooled: the next read maps at once
  assert.equal(readsPending(device), false);
  assert.equal(partsOf(new RunEncoder(device, 60, false)), 3);
  const reading = y.read();
  assert.equal(readsPending(device), true);
  assert.equal(partsOf(new RunEncoder(device, 60, false)), 0);
  assert.deepEqual(numbers((await reading).data), [2, 3, 4, 5]);
  assert.equal(readsPending(device), false);
  assert.equal(partsOf(new RunEncoder(device, 60, true)), 0, "timed runs are whole");
  y.dispose();
});
