/**
 * A program's own buffers (its host arguments' and small intermediates'): runs in flight together
 * each get their own answer, a kept output is not overwritten by the next run, and pipelined runs
 * bind the same buffers (no bind group made once they are warm). On the software adapter in CI.
 */
import assert from "node:assert/strict";
import { compile, DeviceTensor, type TensorMap } from "../../mod.ts";
import { GraphBuilder } from "../../jit/frontend/graph_builder.ts";
import { f32, numbers } from "../../jit/testing/testing.ts";
import { WebGpuBackend } from "./webgpu_backend.ts";

const gpu = new WebGpuBackend();

/** y = (x · 2 + 1) summed over its rows, and z = x + 3: small intermediates. */
async function small() {
  const b = new GraphBuilder();
  const x = b.input("x", [4, 8]);
  const t = b.op("Add", [b.op("Mul", [x, b.constant(2)]), b.constant(1)]);
  b.output("y", b.op("ReduceSum", [t], { axes: [1] }));
  b.output("z", b.op("Add", [x, b.constant(3)]));
  return await compile(b.build(), { backend: gpu, cache: false });
}

const input = (v: number) => f32(new Float32Array(32).fill(v), [4, 8]);

Deno.test("runs in flight together each read their own arguments and give their own outputs", async () => {
  const exe = await small();
  await exe.run({ x: input(9) });
  // Submitted one after another before any is awaited, on a warm program: each writes the
  // program's argument buffer, or a pooled one while another run has written it and not yet
  // submitted.
  const runs = [0, 1, 2, 3, 4, 5].map((v) => exe.run({ x: input(v) }));
  const outs = await Promise.all(runs);
  outs.forEach((o, v) => {
    assert.deepEqual(numbers(o.y.data), [0, 1, 2, 3].map(() => 8 * (2 * v + 1)));
    assert.deepEqual(numbers(o.z.data), new Array(32).fill(v + 3));
  });
});

Deno.test("an output kept on the device outlives the program's next runs", async () => {
  const exe = await small();
  const first = await exe.runOnDevice({ x: input(1) });
  await exe.run({ x: input(7) });
  await exe.runOnDevice({ x: input(9) });
  assert.ok(first.y instanceof DeviceTensor);
  assert.deepEqual(numbers((await first.y.read()).data), [24, 24, 24, 24]);
  assert.deepEqual(numbers((await first.z.read()).data), new Array(32).fill(4));
  for (const t of Object.values(first)) t.dispose();
});

Deno.test("pipelined runs of a warm program make no bind groups", async () => {
  const exe = await small();
  const pair = (v: number) => Promise.all([exe.run({ x: input(v) }), exe.run({ x: input(v + 1) })]);
  await pair(0);
  await pair(2);
  const device = gpu.device!;
  const create = device.createBindGroup;
  let created = 0;
  device.createBindGroup = (d) => (created++, create.call(device, d));
  try {
    // A pair's second run writes its arguments to pooled buffers (the first has not submitted),
    // which come back in the same order each time once warm.
    for (let v = 4; v < 12; v += 2) await pair(v);
  } finally {
    device.createBindGroup = create;
  }
  assert.equal(created, 0);
});

/** y = x · 2 over a large x (1 MiB and more): written through the binding's upload buffer. */
async function large() {
  const b = new GraphBuilder();
  const x = b.input("x", [512, 1024]);
  b.output("y", b.op("Mul", [x, b.constant(2)]));
  return await compile(b.build(), { backend: gpu, cache: false });
}

const big = (v: number) =>
  f32(Float32Array.from({ length: 512 * 1024 }, (_, i) => v + (i % 7)), [512, 1024]);
const doubled = (o: TensorMap, v: number) =>
  (o.y.data as Float32Array).every((y, i) => y === 2 * (v + (i % 7)));

Deno.test("large arguments go through the binding's upload buffer, not writeBuffer", async () => {
  const exe = await large();
  const queue = gpu.device!.queue;
  const write = queue.writeBuffer;
  let largeWrites = 0;
  queue.writeBuffer = (...a: Parameters<GPUQueue["writeBuffer"]>) => {
    if (a[0].size >= 1 << 20) largeWrites++;
    return write.apply(queue, a);
  };
  try {
    for (let v = 0; v < 5; v++) assert.ok(doubled(await exe.run({ x: big(v) }), v), `run ${v}`);
  } finally {
    queue.writeBuffer = write;
  }
  assert.equal(largeWrites, 0);
});

Deno.test("large arguments of runs in flight together each reach their own run", async () => {
  const exe = await large();
  await exe.run({ x: big(1) });
  // The first run writes the upload buffer; the others, before it is mapped again, write pooled
  // buffers through the queue.
  const outs = await Promise.all([3, 4, 5].map((v) => exe.run({ x: big(v) })));
  outs.forEach((o, j) => assert.ok(doubled(o, j + 3), `run ${j + 3}`));
  assert.ok(doubled(await exe.run({ x: big(9) }), 9));
});
