/**
 * One run of an executable on its program: the run checked and ready ({@linkcode Run}), the
 * program driven on the host or on its device memory, the transfers it really makes counted, and
 * host outputs made the caller's (copied where they alias an input, widened back to f64).
 *
 * @module
 */
import type { Program } from "./backend.ts";
import { DeviceTensor } from "./device_tensor.ts";
import { count } from "./counters.ts";
import { boundaryData, internalDType, matchesDType, type TensorData } from "../ir/dtype.ts";
import type { Graph, GraphOutput } from "../ir/graph.ts";
import type { HostTensor, RefTensor } from "../ir/host_tensor.ts";
import { type Shape, sizeOf } from "../ir/shape.ts";
import { convertData, type Widened } from "../passes/precision.ts";
import type { Transfer } from "../schedule/schedule.ts";
import { KilnError } from "../support/errors.ts";

/**
 * The wanted outputs' data of `run` on `program`: on the device where the program keeps it (or
 * repeats on it), else on the host, state fed back between repetitions.
 */
export async function runProgram(
  program: Program,
  run: Run,
): Promise<(TensorData | DeviceTensor)[]> {
  const { repeat, wanted, feedback, partial, resident } = run;
  // Device tensors of another backend (all of them, where the program has no device memory)
  // come to the host first: a transfer each. Host arguments beside them are copied now, in this
  // synchronous map, before any read settles: the caller may change its arrays once `run` returns.
  const foreign = (a: RefTensor | DeviceTensor): a is DeviceTensor =>
    a instanceof DeviceTensor && (resident === undefined || a.backend !== run.backend);
  const args = run.args.some(foreign)
    ? await Promise.all(
      run.args.map((a) =>
        foreign(a) ? toHost(a) : a instanceof DeviceTensor ? a : { ...a, data: a.data.slice() }
      ),
    )
    : run.args;
  const device = run.onDevice || args.some((a) => a instanceof DeviceTensor);
  if (resident && (device || repeat > 1)) {
    const out = await resident(args, wanted, {
      repeat,
      feedback,
      keep: wanted.map(() => run.onDevice),
      active: partial,
      into: run.into,
    });
    return spendDonated(run, out);
  }
  let current = args as RefTensor[];
  let data: TensorData[] = [];
  for (let r = 0; r < repeat; r++) {
    data = await program.run(current, wanted, partial, r === repeat - 1 ? run.into : undefined);
    const next = [...current];
    for (const [o, a] of feedback) next[a] = { ...next[a], data: data[wanted.indexOf(o)] };
    current = next;
  }
  return spendDonated(run, data);
}

/**
 * The argument indices of a run whose data it may write over (`CompileOptions.donate`, by input
 * name), checked: a donated device tensor feeds one run, so not a repeated one.
 */
export function donatedArguments(
  graph: Graph,
  donate: readonly string[] | undefined,
  args: readonly (RefTensor | DeviceTensor)[],
  repeat: number,
): Set<number> {
  const donated = new Set(
    (donate ?? []).map((name) => graph.inputs.findIndex((i) => i.name === name)),
  );
  for (const i of donated) {
    if (repeat > 1 && args[i] instanceof DeviceTensor) {
      throw new KilnError(
        `input "${
          graph.inputs[i].name
        }" is donated, so its device tensor feeds one run, not ${repeat}`,
        { code: "bad-input", fix: "pass it as a host array to repeat the run, or run once" },
      );
    }
  }
  return donated;
}

/**
 * `out`, after the donated device tensors among the run's arguments are disposed: the run was
 * theirs to write over (one an output holds is kept).
 */
function spendDonated<T>(run: Run, out: T[]): T[] {
  const held = new Set(out.flatMap((d) => (d instanceof DeviceTensor ? [d.storage()] : [])));
  for (const i of run.donated ?? []) {
    const a = run.args[i];
    if (a instanceof DeviceTensor && !a.disposed && !held.has(a.storage())) a.dispose();
  }
  return out;
}

/** A device tensor's data as a host argument: a transfer, counted. */
async function toHost(t: DeviceTensor): Promise<RefTensor> {
  const data = await t.storage().read(0, sizeOf(t.shape));
  count("kiln_transfers_total");
  count("kiln_bytes_downloaded_total", data.byteLength);
  return { data, shape: t.shape, dtype: internalDType(t.dtype) };
}

/** Output `o`'s host tensor from `d`: copied if the caller owns it, cut, widened back. */
export function hostOutput(
  o: GraphOutput,
  d: TensorData,
  how: {
    shape: Shape;
    declared: Shape;
    given: ReadonlySet<TensorData>;
    widened?: Widened;
  },
): HostTensor {
  const { shape, declared, given, widened } = how;
  let host = given.has(d) ? d.slice() : d;
  // A bucketed run's output is cut to its active rows.
  if (shape !== declared) host = host.slice(0, sizeOf(shape));
  if (widened?.outputs.has(o.name) && matchesDType(host, widened.narrow)) {
    const data = convertData(host, widened.narrow, widened.wide);
    return { data, shape, dtype: widened.wide };
  }
  return {
    data: boundaryData(host, o.dtype),
    shape,
    dtype: o.dtype,
  };
}

/**
 * Counts the copies one run really makes of those planned: an input given as a device tensor is
 * not uploaded, and an output left on the device (`runOnDevice`) or not requested is not
 * downloaded; `DeviceTensor.read()` and `write()` count their own.
 */
export function countTransfers(
  planned: readonly Transfer[],
  run: { readonly resident: ReadonlySet<number>; readonly downloaded: ReadonlySet<number> },
): void {
  for (const t of planned) {
    if (t.from === "host" && run.resident.has(t.value)) continue;
    if (t.to === "host" && !run.downloaded.has(t.value)) continue;
    count("kiln_transfers_total");
    if (t.from === "host") count("kiln_bytes_uploaded_total", t.bytes);
    if (t.to === "host") count("kiln_bytes_downloaded_total", t.bytes);
  }
}

/** One run, checked and ready: its arguments, the outputs it computes and how. */
export interface Run {
  /** Id of the backend the program runs on (its device tensors are used in place). */
  readonly backend: string;
  readonly args: readonly (RefTensor | DeviceTensor)[];
  readonly repeat: number;
  /** Output indices the caller asked for. */
  readonly requested: readonly number[];
  /** Those and the state outputs, in the order the program returns them. */
  readonly wanted: number[];
  /** State outputs fed back as inputs between repetitions: [output, input]. */
  readonly feedback: [number, number][];
  readonly onDevice: boolean;
  /** The program's run on device memory, where it has one. */
  readonly resident?: Program["runResident"];
  /** The caller's own input buffers (an output that is one is copied). */
  readonly given: ReadonlySet<TensorData>;
  /** Rows active in a bucketed run (undefined: all). */
  readonly partial?: number;
  /** Per wanted output: the caller's array to read it into (`RunOptions.into`), where one fits. */
  readonly into?: readonly (TensorData | undefined)[];
  /** Arguments the run may write over, whose device tensors it disposes (`donatedArguments`). */
  readonly donated?: ReadonlySet<number>;
}
