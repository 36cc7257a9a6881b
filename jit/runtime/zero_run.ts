/**
 * A run on zeros that leaves nothing behind: how an executable on a GPU warms up, its first run
 * creating its buffers and uploading its weights before the runs that are timed.
 *
 * @module
 */
import { allocate } from "../ir/dtype.ts";
import type { Graph } from "../ir/graph.ts";
import { sizeOf } from "../ir/shape.ts";
import { DeviceTensor } from "./device_tensor.ts";
import type { HostTensor } from "../ir/host_tensor.ts";

/** Runs `exe` once on zero inputs, its outputs left on the device and freed. */
export async function runOnZeros(exe: {
  readonly graph: Graph;
  runOnDevice(inputs: Record<string, HostTensor>): PromiseLike<Record<string, unknown>>;
}): Promise<void> {
  const zeros = Object.fromEntries(
    exe.graph.inputs.map((i) => [i.name, {
      data: allocate(i.dtype, sizeOf(i.shape)),
      shape: i.shape,
      dtype: i.dtype,
    }]),
  ) as Record<string, HostTensor>;
  try {
    const out = await exe.runOnDevice(zeros);
    for (const t of Object.values(out)) if (t instanceof DeviceTensor) t.dispose();
  } catch {
    // What zeros cannot run (a gather of index 0 from an empty axis), the real runs report.
  }
}
