/**
 * Runs of many kernels are submitted in parts (`run_encoder.ts`): the parts are submitted in
 * order and the answer is the one a single submit gives. On the software adapter in CI.
 */
import assert from "node:assert/strict";
import { compile } from "../../mod.ts";
import { GraphBuilder } from "../../jit/frontend/graph_builder.ts";
import { f32, numbers } from "../../jit/testing/testing.ts";
import { WebGpuBackend } from "./webgpu_backend.ts";
import { SPLIT_FROM } from "./run_encoder.ts";

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
  assert.equal(twice, 4, "the parts count dispatches across repetitions");
});

Deno.test("a run of few kernels is submitted once", async () => {
  const exe = await chain(SPLIT_FROM - 8);
  const parts = await submits(async () => await exe.run({ x: f32([1, 1], [1, 2]) }));
  assert.equal(parts, 1);
});
