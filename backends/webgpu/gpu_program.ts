/**
 * The GPU program: a whole fused plan on one device. Each run writes the inputs, encodes every
 * kernel's dispatch into one command encoder, copies all requested outputs into one staging
 * buffer, submits once and awaits exactly one `mapAsync` — in Deno every GPU await costs about
 * 10 ms, so this is the main lever. Params and constants stay resident between runs;
 * intermediates come from the pool and return to it after the run's single await.
 *
 * @module
 */
import type { KernelTime, Program } from "../backend.ts";
import type { RefTensor } from "../reference/tensor_io.ts";
import type { DType, TensorData } from "../../jit/dtype.ts";
import { KilnError } from "../../jit/errors.ts";

import type { HostTensor } from "../../jit/host_tensor.ts";
import { type KernelIR, rowCount } from "../../jit/kernel_ir.ts";
import { serialized } from "../../jit/program.ts";
import { sizeOf } from "../../jit/shape.ts";
import { dispatchSize, kernelLayout, type WgslOptions } from "../../shaders/wgsl.ts";
import type { BufferPool } from "./buffer_pool.ts";
import { fromWords, toWords } from "../words.ts";

/** What a GPU program runs on. */
export interface GpuContext {
  /** The device. */
  readonly device: GPUDevice;
  /** Its buffer pool. */
  readonly pool: BufferPool;
  /** What its generated kernels were generated for (their layouts follow from it). */
  readonly wgsl: WgslOptions;
  /** Whether to time each kernel with timestamp queries (the device has `timestamp-query`). */
  readonly timestamps?: boolean;
  /** Throws when the device was lost (or replaced) since the program was built. */
  check(): void;
}

/** A plan for one device. */
export interface GpuPlan {
  /** Values bound from the run's arguments, in argument order; `resident` ones (params) stay uploaded. */
  readonly bindings: readonly { readonly value: number; readonly resident: boolean }[];
  /** The value of each output index `run` may be asked for. */
  readonly outputs: readonly number[];
  /** Kernels in execution order (none opaque). */
  readonly kernels: readonly KernelIR[];
  /** One pipeline per kernel (`undefined` for `ToDevice`, which is a buffer copy). */
  readonly pipelines: readonly (GPUComputePipeline | undefined)[];
  /** Constant buffers (value id → data). */
  readonly constants: ReadonlyMap<number, HostTensor>;
  /** Per kernel: whether a bucketed run dispatches only the active rows. */
  readonly partial?: readonly boolean[];
}

const STORAGE = 0x80 | 0x08 | 0x04; // STORAGE | COPY_DST | COPY_SRC
const STAGING = 0x01 | 0x08; // MAP_READ | COPY_DST
const RESOLVE = 0x200 | 0x04; // QUERY_RESOLVE | COPY_SRC
// Numeric like the usages, so nothing needs the GPUMapMode global (absent on Node's `webgpu`).
const MAP_READ = 0x01;

const words = (shape: readonly number[]) => Math.max(1, sizeOf(shape)) * 4;

/** Builds the program for `plan` on `ctx`. */
export function gpuProgram(ctx: GpuContext, plan: GpuPlan): Program {
  const { bindings, kernels, pipelines, constants } = plan;
  const { device, pool } = ctx;
  const resident = new Map<TensorData, GPUBuffer>();
  // Two timestamps per kernel (pass begin and end), resolved and read back with the outputs.
  const queries = ctx.timestamps
    ? device.createQuerySet({ type: "timestamp", count: 2 * Math.max(1, kernels.length) })
    : undefined;
  let times: KernelTime[] = [];
  const layouts = kernels.map((k) => (k.opaque ? undefined : kernelLayout(k, ctx.wgsl)));
  const types = new Map<number, { shape: readonly number[]; dtype: DType }>();
  for (const k of kernels) for (const b of [...k.inputs, ...k.outputs]) types.set(b.value, b);
  for (const [v, t] of constants) types.set(v, { shape: t.shape, dtype: t.dtype as DType });

  const upload = (
    data: TensorData,
    dtype: DType,
    keep: boolean,
    acquired: GPUBuffer[],
  ): Promise<GPUBuffer> => {
    const hit = resident.get(data);
    if (hit) return Promise.resolve(hit);
    const w = toWords(data, dtype);
    return pool.acquire(Math.max(4, w.byteLength), STORAGE).then((buffer) => {
      if (w.byteLength) device.queue.writeBuffer(buffer, 0, w as Float32Array<ArrayBuffer>);
      if (keep) resident.set(data, buffer);
      else acquired.push(buffer);
      return buffer;
    });
  };

  const runOnce = async (
    args: readonly RefTensor[],
    outputs: readonly number[],
    active?: number,
  ): Promise<TensorData[]> => {
    ctx.check();
    const acquired: GPUBuffer[] = [];
    const buffers = new Map<number, GPUBuffer>();
    try {
      await Promise.all(bindings.map(async (b, i) => {
        if (types.has(b.value)) {
          buffers.set(b.value, await upload(args[i].data, args[i].dtype, b.resident, acquired));
        }
      }));
      for (const [v, t] of constants) {
        buffers.set(v, await upload(t.data, t.dtype as DType, true, acquired));
      }
      for (const k of kernels) {
        for (const o of k.outputs) {
          const b = await pool.acquire(words(o.shape), STORAGE);
          acquired.push(b);
          buffers.set(o.value, b);
        }
      }
      const wanted = outputs.map((i) => plan.outputs[i]).filter((v) =>
        !bindings.some((b) => b.value === v)
      );
      const offsets = new Map<number, number>();
      let total = 0;
      for (const v of wanted) {
        if (offsets.has(v)) continue;
        offsets.set(v, total);
        total += words(types.get(v)!.shape);
      }
      const stamps = Math.ceil(total / 8) * 8, stampBytes = queries ? queries.count * 8 : 0;
      total = stamps + stampBytes;
      const resolved = queries ? await pool.acquire(stampBytes, RESOLVE) : undefined;
      if (resolved) acquired.push(resolved);
      const timed = new Set<number>();
      const staging = await pool.acquire(Math.max(4, total), STAGING);
      acquired.push(staging);

      device.pushErrorScope("validation");
      const encoder = device.createCommandEncoder();
      kernels.forEach((k, i) => {
        if (k.opaque?.op === "ToDevice") {
          encoder.copyBufferToBuffer(
            buffers.get(k.inputs[0].value)!,
            0,
            buffers.get(k.outputs[0].value)!,
            0,
            words(k.outputs[0].shape),
          );
          return;
        }
        const rows = active !== undefined && plan.partial?.[i]
          ? rowCount(k) / k.space[0] * active
          : rowCount(k);
        if (rows === 0) return;
        if (queries) timed.add(i);
        const pass = encoder.beginComputePass({
          label: k.name,
          ...(queries
            ? {
              timestampWrites: {
                querySet: queries,
                beginningOfPassWriteIndex: 2 * i,
                endOfPassWriteIndex: 2 * i + 1,
              },
            }
            : {}),
        });
        pass.setPipeline(pipelines[i]!);
        pass.setBindGroup(
          0,
          device.createBindGroup({
            layout: pipelines[i]!.getBindGroupLayout(0),
            entries: [...k.inputs, ...k.outputs].map((b, j) => ({
              binding: j,
              resource: { buffer: buffers.get(b.value)! },
            })),
          }),
        );
        const [x, y, z] = dispatchSize(layouts[i]!, rows);
        pass.dispatchWorkgroups(x, y, z);
        pass.end();
      });
      for (const [v, off] of offsets) {
        encoder.copyBufferToBuffer(buffers.get(v)!, 0, staging, off, words(types.get(v)!.shape));
      }
      if (queries && resolved) {
        encoder.resolveQuerySet(queries, 0, queries.count, resolved, 0);
        encoder.copyBufferToBuffer(resolved, 0, staging, stamps, stampBytes);
      }
      device.queue.submit([encoder.finish()]);
      const error = await device.popErrorScope();
      if (error) {
        throw new KilnError(
          `WebGPU rejected the run of ${kernels.map((k) => k.name).join(", ")}: ${error.message}`,
          {
            code: "backend",
            fix:
              "report this with the kernel's WGSL (explain shows it); use the reference backend meanwhile",
          },
        );
      }
      await staging.mapAsync(MAP_READ);
      const bytes = staging.getMappedRange();
      const data = outputs.map((i) => {
        const v = plan.outputs[i];
        const binding = bindings.findIndex((b) => b.value === v);
        if (binding >= 0) return args[binding].data;
        const t = types.get(v)!;
        return fromWords(bytes, offsets.get(v)!, sizeOf(t.shape), t.dtype);
      });
      if (queries) {
        const t = new BigUint64Array(bytes, stamps, queries.count);
        times = [...timed].map((i) => ({
          kernel: kernels[i].name,
          ms: Number(t[2 * i + 1] - t[2 * i]) / 1e6,
        }));
      }
      staging.unmap();
      return data;
    } catch (e) {
      if (e instanceof KilnError) throw e;
      // A destroyed device fails the map before its lost promise settles: give it a moment.
      await new Promise((r) => setTimeout(r, 0));
      ctx.check();
      throw new KilnError(
        `The WebGPU run failed (${(e as Error).message}); the device may have been lost`,
        {
          code: "backend",
          fix:
            "call recover() on the webgpu backend and compile again (the auto policy falls back to the CPU meanwhile)",
          cause: e,
        },
      );
    } finally {
      pool.release(acquired);
    }
  };

  return {
    run: serialized(runOnce),
    deviceTimes: () => times,
    dispose() {
      queries?.destroy();
      pool.release(resident.values());
      resident.clear();
    },
  };
}
