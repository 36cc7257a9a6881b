/**
 * The least time any WebGPU result takes to reach the host in Deno: a 4 KB readback by
 * `mapAsync` right after its copy is submitted, `onSubmittedWorkDone` alone, and a second buffer
 * mapped while a first one is pending (each timed from its own call). Any adapter will do, the
 * software one included:
 *
 *   deno run -A bench/readback_floor.ts          (Deno's WebGPU)
 *   KILN_GPU=dawn deno run -A bench/readback_floor.ts   (Dawn, with KILN_DAWN_FLAGS)
 *   deno run -A bench/readback_floor.ts --bytes 25731584   (and a large result, step by step)
 *
 * With `--bytes N` it also times a large result's way to the host, step by step: the copy and
 * map, the range copied into a fresh array (what a read hands out), into an array kept from
 * before, a second copy of the same mapping, and the same two copies between ordinary arrays.
 *
 * Deno's `mapAsync` polls the device and then sleeps 10 ms before it looks at whether the map
 * is done (`ext/webgpu/buffer.rs`, `map_async`, in Deno's source of 2025), so every awaited
 * readback costs 10 ms or more however little the GPU did: 10.2–11.6 ms in Deno 2.9.6, on
 * llvmpipe and on the H200 alike. Dawn's took 0.035 ms on the H200 (webgpu 0.6.2). The models
 * report (`bench/REPORT-models.md`) cites this.
 *
 * @module
 */
import { WebGpuBackend } from "../mod.ts";

// The backend picks the implementation (KILN_GPU) and the adapter as kiln would.
const backend = new WebGpuBackend({ allowSoftware: true });
await backend.prepare();
const name = backend.capabilities().name;
const device = backend.device!;
const bytes = 4096;
const source = device.createBuffer({
  size: bytes,
  usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST,
});
device.queue.writeBuffer(source, 0, new Float32Array(bytes / 4).fill(3));
const staging = () =>
  device.createBuffer({ size: bytes, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
const [a, b] = [staging(), staging()];

/** Submits a copy of `source` into `target`. */
function copyInto(target: GPUBuffer): void {
  const encoder = device.createCommandEncoder();
  encoder.copyBufferToBuffer(source, 0, target, 0, bytes);
  device.queue.submit([encoder.finish()]);
}

/** Milliseconds until `start()`'s promise settles. */
async function timed(start: () => Promise<unknown>): Promise<number> {
  const t = performance.now();
  await start();
  return performance.now() - t;
}

const median = (xs: number[]) => xs.sort((p, q) => p - q)[xs.length >> 1];

/** Milliseconds `f` takes. */
function clocked(f: () => unknown): number {
  const t = performance.now();
  f();
  return performance.now() - t;
}

/** The steps of a readback of `size` bytes, timed one by one (medians of 11). */
async function largeRows(size: number): Promise<[string, number[]][]> {
  const usage = GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST;
  const big = device.createBuffer({ size, usage });
  const staged = device.createBuffer({
    size,
    usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST,
  });
  const kept = new Uint8Array(size), host = new Uint8Array(size).fill(7);
  const rows: [string, number[]][] = [
    "copy and mapAsync",
    "mapped range into a fresh array",
    "mapped range again, into a fresh array",
    "mapped range into a kept array",
    "host array into a fresh array",
    "host array into a kept array",
  ].map((name) => [`${name} (${(size / 1e6).toFixed(1)} MB)`, []]);
  for (let i = 0; i < 11; i++) {
    const encoder = device.createCommandEncoder();
    encoder.copyBufferToBuffer(big, 0, staged, 0, size);
    const t = performance.now();
    device.queue.submit([encoder.finish()]);
    await staged.mapAsync(GPUMapMode.READ);
    rows[0][1].push(performance.now() - t);
    const range = staged.getMappedRange();
    rows[1][1].push(clocked(() => range.slice(0)));
    rows[2][1].push(clocked(() => range.slice(0)));
    rows[3][1].push(clocked(() => kept.set(new Uint8Array(range))));
    staged.unmap();
    rows[4][1].push(clocked(() => host.slice(0)));
    rows[5][1].push(clocked(() => kept.set(host)));
  }
  return rows;
}
const rows: [string, number[]][] = [["mapAsync after a copy", []], [
  "onSubmittedWorkDone after an empty submit",
  [],
], ["mapAsync of a second buffer 5 ms into a pending one", []]];
for (let i = 0; i < 11; i++) {
  copyInto(a);
  rows[0][1].push(await timed(() => a.mapAsync(GPUMapMode.READ)));
  a.unmap();
  device.queue.submit([]);
  rows[1][1].push(await timed(() => device.queue.onSubmittedWorkDone()));
  const first = a.mapAsync(GPUMapMode.READ);
  await new Promise((r) => setTimeout(r, 5));
  copyInto(b);
  rows[2][1].push(await timed(() => b.mapAsync(GPUMapMode.READ)));
  await first;
  a.unmap();
  b.unmap();
}
const at = Deno.args.indexOf("--bytes");
if (at >= 0) rows.push(...await largeRows(Number(Deno.args[at + 1])));
console.log(`Deno ${Deno.version.deno}, ${name}`);
for (const [name, ms] of rows) {
  console.log(
    `${name}: median ${median(ms).toFixed(2)} ms (${Math.min(...ms).toFixed(2)}–${
      Math.max(...ms).toFixed(2)
    })`,
  );
}
