/**
 * {@linkcode Executable}: a compiled graph bound to a backend, with its parameters. `run` checks
 * every input against the graph's declarations before anything executes, so bad data gets a clear
 * error and the executable stays usable; results come back through a {@linkcode RunHandle} as
 * fresh arrays that never alias the caller's inputs.
 *
 * @module
 */
import type { Backend, KernelTime, Program } from "./backend.ts";
import type { RefTensor } from "../ir/host_tensor.ts";
import { acceptDevice, deferChecks, DeviceTensor } from "./device_tensor.ts";
import { matchesDType, type TensorData } from "../ir/dtype.ts";
import { convertData, type Widened } from "../passes/precision.ts";
import { KilnError } from "../support/errors.ts";
import type { Graph, GraphInput } from "../ir/graph.ts";
import { acceptInput, type HostTensor } from "../ir/host_tensor.ts";
import type { KernelIR } from "../ir/kernel_ir.ts";
import type { MemoryPlan } from "../schedule/memory_plan.ts";
import { checkInto, deliver, type IntoMap, intoTargets } from "./into.ts";
import { assertCheck, DeviceChecks, isCheck, outputIndices, settleChecks } from "./checks.ts";
import { RunHandle, type RunTiming } from "./run_handle.ts";
import {
  checkInputNames,
  checkRunOptions,
  type DeviceTensorMap,
  type InputMap,
  type RunOptions,
  type TensorMap,
} from "./run_types.ts";
import type { Variants } from "./specialize.ts";
import type { Shape } from "../ir/shape.ts";
import { runOnZeros } from "./zero_run.ts";
import { countTransfers, donatedArguments, hostOutput, type Run, runProgram } from "./run.ts";
import type { Schedule } from "../schedule/schedule.ts";
import { count } from "./counters.ts";
import type { BucketPlan } from "../schedule/buckets.ts";
import { type DrawnInput, Draws } from "../passes/random_inputs.ts";

/** How an executable was compiled: its kernels and the decisions behind them. */
export interface PlanInfo {
  /** Backend the kernels run on. */
  readonly backend: string;
  /** Kernels in execution order. */
  readonly kernels: readonly KernelIR[];
  /** Fusion decisions (boundaries and their reasons). */
  readonly log: readonly string[];
  /** Intermediate buffer plan. */
  readonly memory: MemoryPlan;
  /** Where each kernel's code came from. */
  readonly sources: Readonly<{ memory: number; disk: number; generated: number }>;
  /** Placement of each kernel, transfers and cost estimates. */
  readonly schedule: Schedule;
}

export type { DeviceTensorMap, InputMap, RunOptions, TensorMap } from "./run_types.ts";

// Device tensors an executable holds as state may be shared with its clones (runs never write
// into their inputs, so sharing is safe); the last holder to let go disposes them.
const holders = new WeakMap<DeviceTensor, number>();
const hold = (t: TensorData | DeviceTensor) => {
  if (t instanceof DeviceTensor) holders.set(t, (holders.get(t) ?? 0) + 1);
};
const drop = (t: TensorData | DeviceTensor | undefined) => {
  if (!(t instanceof DeviceTensor)) return;
  const n = (holders.get(t) ?? 1) - 1;
  holders.set(t, n);
  if (n <= 0) t.dispose();
};

/** What an executable is built from. */
export interface ExecutableInit {
  /** The graph as the user gave it (its declarations are what `run` checks against). */
  readonly graph: Graph;
  /** The backend it runs on. */
  readonly backend: Backend;
  /** The compiled program. */
  readonly program: Program;
  /** Milliseconds the compile took. */
  readonly compileMs: number;
  /** The fused plan, when the backend compiled kernel IR. */
  readonly plan?: PlanInfo;
  /** State bindings: output name → the input it refreshes after every run. */
  readonly state?: Readonly<Record<string, string>>;
  /** Inputs whose data each run gives up (`CompileOptions.donate`). */
  readonly donate?: readonly string[];
  /** Shape buckets: which inputs may run with a smaller axis 0, and what follows them. */
  readonly buckets?: BucketPlan;
  /** f16 inputs, params and outputs the caller passes and gets as f32 (a precision policy). */
  readonly widened?: Widened;
  /** Why a graph-level backend runs the whole graph (a policy chose it); `explain` shows it. */
  readonly reason?: string;
  /** Inputs drawn at random on every run (the graph's random ops; see `random_inputs.ts`). */
  readonly drawn?: readonly DrawnInput[];
}

/** Sets what {@linkcode settleCompile} settles. */
let settle: typeof settleCompile;

/**
 * Settles what a compile learned after building `exe` (each where given): the whole compile's
 * time (a placement trial builds plans and times them after the one it keeps was built: `kiln
 * run` reported 0.65 s for a 3.5 s compile), why its plan runs where it does, and its variants
 * by where the inputs lie (the local-first policy).
 */
export function settleCompile(
  exe: Executable,
  settled: { readonly compileMs?: number; readonly reason?: string; readonly variants?: Variants },
): void {
  settle(exe, settled);
}

/** A compiled graph. */
export class Executable {
  /** The graph this executable was compiled from. */
  readonly graph: Graph;
  /** The backend it runs on. */
  readonly backend: Backend;
  /** State bindings: output name → the input it refreshes after every run. */
  readonly state: Readonly<Record<string, string>>;
  /** Why the work runs where it does, when there is no fused plan (a graph-level backend). */
  readonly reason?: string;
  #init: ExecutableInit;
  #compileMs: number;
  #plan?: PlanInfo;
  #program: Program;
  #params = new Map<string, TensorData>();
  #stateData = new Map<string, TensorData | DeviceTensor>();
  #queue: Promise<unknown> = Promise.resolve();
  #draws: Draws;
  #disposed = false;
  /** Whether a GPU warm-up ran (see `warmUp`). */
  #warm = false;
  /** Runs not yet settled: the program outlives them when disposed mid-run. */
  #inflight = new Set<Promise<unknown>>();
  /** Variants that runs with inputs elsewhere go to (see `specialize.ts`). */
  #variants?: Variants;

  /** Wraps a compiled program; use `compile()` rather than calling this. */
  constructor(init: ExecutableInit) {
    this.graph = init.graph;
    this.backend = init.backend;
    this.#compileMs = init.compileMs;
    this.#plan = init.plan;
    this.state = init.state ?? {};
    this.reason = init.reason;
    this.#init = init;
    this.#draws = new Draws(init.drawn ?? []);
    this.#program = init.program;
    for (const p of init.graph.params) if (p.data) this.#params.set(p.name, p.data);
    this.#checkState();
  }

  static {
    settle = (exe, { compileMs = exe.#compileMs, reason, variants }) => {
      exe.#compileMs = compileMs;
      exe.#variants = variants ?? exe.#variants;
      const plan = exe.#plan;
      if (plan && reason !== undefined) {
        exe.#plan = { ...plan, schedule: { ...plan.schedule, reason } };
      }
    };
  }

  /** Milliseconds spent compiling. */
  get compileMs(): number {
    return this.#compileMs;
  }

  /** The fused plan, when the backend compiled kernel IR. */
  get plan(): PlanInfo | undefined {
    return this.#plan;
  }

  /** A copy sharing the compiled program (no recompile) with its own params and state. */
  clone(): Executable {
    this.#check();
    const copy = new Executable({ ...this.#init, compileMs: this.#compileMs, plan: this.#plan });
    for (const [k, v] of this.#params) copy.#params.set(k, v);
    for (const [k, v] of this.#stateData) {
      hold(v);
      copy.#stateData.set(k, v);
    }
    return copy;
  }

  /**
   * Runs several input sets back to back (state bindings flow from one to the next) and returns
   * one handle per set; all are in flight at once, results arrive in order.
   */
  runPipelined(inputSets: readonly InputMap[], options?: RunOptions): RunHandle<TensorMap>[] {
    if (Object.keys(this.state).length === 0) {
      // Without state the runs are independent: all start now, and a GPU keeps them in flight
      // together, each with its own buffers and staging.
      return inputSets.map((inputs) => {
        try {
          return this.run(inputs, options);
        } catch (e) {
          return new RunHandle<TensorMap>(Promise.reject(e));
        }
      });
    }
    return inputSets.map((inputs) => {
      const turn = this.#queue.then(() => this.run(inputs, options).result());
      this.#queue = turn.catch(() => {});
      return new RunHandle(turn);
    });
  }

  /** Names of the inputs `run` expects (drawn inputs are the executable's own). */
  get inputNames(): string[] {
    return this.graph.inputs.map((i) => i.name).filter((n) => !this.#draws.has(n));
  }

  /** Names of the outputs `run` returns (checks are the executable's own). */
  get outputNames(): string[] {
    return this.graph.outputs.flatMap((o) => (isCheck(o.name) ? [] : [o.name]));
  }

  /** Replaces a parameter's data (copied). Bad data throws and leaves the old value in place. */
  setParam(name: string, value: HostTensor | TensorData): void {
    this.#check();
    const p = this.graph.params.find((q) => q.name === name);
    if (!p) {
      throw new KilnError(`No parameter "${name}"`, {
        code: "bad-input",
        fix: this.graph.params.length
          ? `use one of: ${this.graph.params.map((q) => q.name).join(", ")}`
          : "this graph has no parameters",
      });
    }
    let t = ArrayBuffer.isView(value) ? { data: value, shape: p.shape, dtype: p.dtype } : value;
    const widened = this.#init.widened;
    if (widened?.params.has(name) && t?.data && matchesDType(t.data, widened.wide)) {
      t = { ...t, data: convertData(t.data, widened.wide, widened.narrow), dtype: widened.narrow };
    }
    const accepted = acceptInput(t, p, `param "${name}"`);
    this.#params.set(name, accepted.data === t.data ? accepted.data.slice() : accepted.data);
  }

  /** Runs the graph on `inputs`; await the handle (or poll it) for the outputs on the host. */
  run(inputs: InputMap, options?: RunOptions): RunHandle<TensorMap> {
    const elsewhere = this.#variants?.run<TensorMap>(inputs, options, false);
    if (elsewhere) return elsewhere;
    const { result, timing } = this.#execute(inputs, options, false);
    return new RunHandle(result as Promise<TensorMap>, timing);
  }

  /**
   * Runs the graph and leaves its outputs in device memory as {@linkcode DeviceTensor}s (yours to
   * `read()` and `dispose()`), where the backend has device memory (WebGPU; wasm in its arena).
   * State outputs stay on the device too. Nothing is read back, so the handle settles without
   * waiting for the device; the run's checks (int64 ranges) are read meanwhile, and one that fails
   * rejects the reads of its outputs and of what later runs compute from them.
   */
  runOnDevice(inputs: InputMap, options?: RunOptions): RunHandle<DeviceTensorMap> {
    const elsewhere = this.#variants?.run<DeviceTensorMap>(inputs, options, true);
    if (elsewhere) return elsewhere;
    const { result, timing } = this.#execute(inputs, options, true);
    return new RunHandle(result as Promise<DeviceTensorMap>, timing);
  }

  /** Validates a run synchronously (bad input throws here), then starts it, timed. */
  #execute(
    inputs: InputMap,
    options: RunOptions | undefined,
    onDevice: boolean,
  ): { result: Promise<TensorMap | DeviceTensorMap>; timing: Promise<RunTiming> } {
    const began = performance.now();
    const run = this.#prepareRun(inputs, options, onDevice);
    const running = this.#results(run);
    const handedOff = performance.now();
    this.#inflight.add(running);
    const settle = () => this.#inflight.delete(running);
    running.then(settle, settle);
    let computed = 0;
    const result = running.then((data) => {
      computed = performance.now();
      return this.#outputsOf(run, data, options?.into);
    });
    const timing = result.then((): RunTiming => {
      const done = performance.now();
      return {
        hostMs: handedOff - began,
        waitMs: computed - handedOff,
        outputMs: done - computed,
        wallMs: done - began,
      };
    });
    return { result, timing };
  }

  /** A run's arguments and outputs, checked; the run counted. */
  #prepareRun(inputs: InputMap, options: RunOptions | undefined, onDevice: boolean): Run {
    this.#check();
    const repeat = checkRunOptions(options);
    const active = this.#activeExtent(inputs);
    const args = this.#snapshot(this.#arguments(inputs, active), inputs, repeat);
    const requested = outputIndices(this.graph, options?.outputs);
    if (!onDevice) checkInto(this.graph, options?.into, requested);
    const stateful = this.graph.outputs.flatMap((o, i) => (o.name in this.state ? [i] : []));
    // A run on the device keeps its own copy of each state output; a host run reads state back.
    const wanted = onDevice
      ? [...requested, ...stateful]
      : [...requested, ...stateful.filter((i) => !requested.includes(i))];
    const feedback = stateful.map((o): [number, number] => [
      o,
      this.graph.inputs.findIndex((i) => i.name === this.state[this.graph.outputs[o].name]),
    ]);
    const resident = this.#program.runResident?.bind(this.#program);
    if (onDevice && !resident) {
      throw new KilnError(
        `runOnDevice needs a backend with device memory; this executable runs on ${this.backend.id}`,
        {
          code: "unsupported",
          fix: "compile for webgpu or wasm, or run() to get host outputs",
        },
      );
    }
    count("kiln_runs_total", repeat);
    count("kiln_dispatches_total", repeat * (this.plan?.kernels.length ?? this.graph.nodes.length));
    countTransfers(this.plan?.schedule.transfers ?? [], {
      resident: new Set(
        this.graph.inputs.flatMap((g, i) => args[i] instanceof DeviceTensor ? [g.value] : []),
      ),
      downloaded: new Set(onDevice ? [] : requested.map((o) => this.graph.outputs[o].value)),
    });
    const buckets = this.#init.buckets;
    return {
      backend: this.backend.id,
      args,
      repeat,
      requested,
      wanted,
      feedback,
      onDevice,
      resident,
      given: new Set(args.flatMap((a) => (a instanceof DeviceTensor ? [] : [a.data]))),
      partial: buckets && active !== undefined && active < buckets.bound ? active : undefined,
      into: onDevice ? undefined : intoTargets(this.graph, options?.into, wanted),
      donated: donatedArguments(this.graph, this.#init.donate, args, repeat),
    };
  }

  /** The wanted outputs' data: on the device where the program keeps it, else on the host. */
  #results(run: Run): Promise<(TensorData | DeviceTensor)[]> {
    return runProgram(this.#program, run);
  }

  /** The run's outputs by name from its `data`: state kept, checks asserted, types restored. */
  async #outputsOf(
    run: Run,
    data: (TensorData | DeviceTensor)[],
    into: IntoMap | undefined,
  ): Promise<TensorMap | DeviceTensorMap> {
    const out: Record<string, HostTensor | DeviceTensor> = {};
    const checks = new DeviceChecks();
    // State kept on the device, which later runs take.
    const kept: DeviceTensor[] = [];
    run.wanted.forEach((idx, k) => {
      const o = this.graph.outputs[idx];
      const shape = this.#activeShape(o.value, run.partial);
      const d = data[k];
      if (k >= run.requested.length) {
        if (d instanceof DeviceTensor) kept.push(d);
        this.#setState(this.state[o.name], d instanceof DeviceTensor ? d : d.slice());
      } else if (d instanceof DeviceTensor) {
        const t = new DeviceTensor(d.storage(), shape, o.dtype);
        if (isCheck(o.name)) checks.add(o.name, t);
        else out[o.name] = t;
      } else if (isCheck(o.name)) assertCheck(o.name, d);
      else {
        if (!run.onDevice && o.name in this.state) this.#setState(this.state[o.name], d.slice());
        out[o.name] = hostOutput(o, d, {
          shape,
          declared: this.graph.values[o.value].shape,
          given: run.given,
          widened: this.#init.widened,
        });
      }
    });
    const pending = checks.pending(run.args);
    if (run.onDevice) {
      // Returned before the checks are read: a read of an output (or of a later run's that
      // takes one) fails where one does (`deferChecks`), and the next run starts meanwhile.
      for (const t of [...Object.values(out), ...kept]) deferChecks(t as DeviceTensor, pending);
      return out as DeviceTensorMap;
    }
    await settleChecks(pending, out);
    for (const [k, t] of Object.entries(out)) out[k] = deliver(k, t as HostTensor, into);
    return out as TensorMap;
  }

  /** Value `value`'s shape in a run over `partial` rows of its bucket (all: undefined). */
  #activeShape(value: number, partial: number | undefined): Shape {
    const v = this.graph.values[value];
    const buckets = this.#init.buckets;
    if (partial === undefined || !buckets!.batched.has(value)) return v.shape;
    return [v.shape[0] / buckets!.bound * partial, ...v.shape.slice(1)];
  }

  #setState(input: string, value: TensorData | DeviceTensor): void {
    const old = this.#stateData.get(input);
    hold(value);
    this.#stateData.set(input, value);
    drop(old);
  }

  /**
   * Warms the compiled program up now rather than at its first runs, for a program about to be
   * run many times and timed, as a generation's decode step is: where its backend warms programs
   * up (wasm: V8 optimizes the kernels and the thread tuner decides, on zero inputs and the
   * params), and on a GPU by a run on zeros, whose first run creates its buffers and uploads its
   * weights (a 24-layer test decoder's first decode step through Dawn: 65 ms, the next ones 30),
   * once.
   */
  async warmUp(): Promise<void> {
    this.#check();
    if (this.#program.warmUp) {
      // Params not set yet warm up as zeros; the first run writes them.
      const set = this.graph.params.every((p) => this.#params.has(p.name));
      return await this.#program.warmUp(set ? this.#paramArguments() : undefined);
    }
    // Once: a generation warms its decode step in every prefill, and a run on zeros uploads
    // zeros for each of its inputs (a 0.5B decoder's caches: 6 MB) and runs a step for nothing.
    if (this.backend.kind !== "gpu" || this.#warm) return;
    this.#warm = true;
    await runOnZeros(this);
  }

  /**
   * Device time per kernel of the last finished run: WebGPU with `profile: true` on a device
   * with `timestamp-query` measures it; elsewhere this is empty.
   */
  deviceTimes(): readonly KernelTime[] {
    return this.#program.deviceTimes?.() ?? [];
  }

  /** Releases the compiled program; later calls throw. */
  dispose(): void {
    if (this.#disposed) return;
    this.#disposed = true;
    this.#variants?.dispose();
    // Runs already started finish on what they hold (a GPU program's resident buffers would
    // otherwise return to the pool under them); the program goes once the last one settles.
    const program = this.#program;
    const pending = [...this.#inflight];
    const release = () => {
      for (const v of this.#stateData.values()) drop(v);
      this.#stateData.clear();
      program.dispose();
    };
    if (pending.length === 0) release();
    else Promise.allSettled(pending).then(release);
  }

  /** Disposes the executable at the end of a `using` block. */
  [Symbol.dispose](): void {
    this.dispose();
  }

  #checkState(): void {
    for (const [out, input] of Object.entries(this.state)) {
      const o = this.graph.outputs.find((x) => x.name === out);
      const i = this.graph.inputs.find((x) => x.name === input);
      if (!o || !i) {
        throw new KilnError(
          `State binding ${out} → ${input} names ${
            !o ? `no output "${out}"` : `no input "${input}"`
          }`,
          {
            code: "bad-input",
            fix: `bind an output (${this.outputNames.join(", ")}) to an input (${
              this.inputNames.join(", ")
            })`,
          },
        );
      }
      const ov = this.graph.values[o.value], iv = this.graph.values[i.value];
      if (ov.dtype !== iv.dtype || ov.shape.join() !== iv.shape.join()) {
        throw new KilnError(
          `State binding ${out} → ${input}: ${ov.dtype}[${ov.shape}] does not match ${iv.dtype}[${iv.shape}]`,
          {
            code: "shape-mismatch",
            fix: "bind an output to an input of the same shape and dtype",
          },
        );
      }
    }
  }

  #check(): void {
    if (this.#disposed) {
      throw new KilnError("This executable was disposed", {
        code: "disposed",
        fix: "compile the graph again",
      });
    }
  }

  /** The batch extent of a bucketed run (`undefined` when the executable has no buckets). */
  #activeExtent(inputs: InputMap): number | undefined {
    const b = this.#init.buckets;
    if (!b || typeof inputs !== "object" || inputs === null) return undefined;
    const extents = [
      ...new Set(b.inputs.flatMap((n) => (inputs[n]?.shape ? [inputs[n].shape[0]] : []))),
    ];
    if (extents.length > 1) {
      throw new KilnError(
        `Bucketed inputs ${b.inputs.join(", ")} have different batch sizes ${extents.join(", ")}`,
        {
          code: "bad-input",
          fix: "pass the same axis-0 extent to every bucketed input",
        },
      );
    }
    const e = extents[0] ?? b.bound;
    if (!Number.isInteger(e) || e < 0 || e > b.bound) {
      throw new KilnError(`Batch size ${e} is outside this executable's bucket [0, ${b.bound}]`, {
        code: "bad-input",
        fix: `pass at most ${b.bound} rows, or compile for a larger bound`,
      });
    }
    return e;
  }

  #arguments(inputs: InputMap, active?: number): (RefTensor | DeviceTensor)[] {
    checkInputNames(inputs, this.inputNames, (name) => this.#stateData.has(name));
    const args: (RefTensor | DeviceTensor)[] = this.graph.inputs.map((i) => {
      if (this.#draws.has(i.name)) {
        return { data: this.#draws.next(i.name), shape: i.shape, dtype: "f32" };
      }
      const given = inputs[i.name];
      const state = this.#stateData.get(i.name);
      if (given instanceof DeviceTensor) {
        return acceptDevice(given, this.#bucketed(i, active), i.name);
      }
      if (i.name in inputs || state === undefined) {
        const t = given as HostTensor | undefined;
        // Under an f16 precision (or narrowF64) the caller's data is narrowed here, before it
        // travels.
        const widened = this.#init.widened;
        const caller = widened?.inputs.has(i.name) && t?.dtype === widened.wide &&
            matchesDType(t.data, widened.wide)
          ? { ...t, data: convertData(t.data, widened.wide, widened.narrow), dtype: widened.narrow }
          : given;
        return acceptInput(caller, this.#bucketed(i, active), `input "${i.name}"`);
      }
      if (state instanceof DeviceTensor) return state;
      return { data: state, shape: i.shape, dtype: this.graph.values[i.value].dtype };
    });
    return [...args, ...this.#paramArguments()];
  }

  /** The params as a run passes them, after its inputs. */
  #paramArguments(): RefTensor[] {
    return this.graph.params.map((p) => {
      const data = this.#params.get(p.name);
      if (!data) {
        throw new KilnError(`Parameter "${p.name}" has no data`, {
          code: "bad-input",
          fix: `call setParam("${p.name}", data) before run()`,
        });
      }
      return { data, shape: p.shape, dtype: this.graph.values[p.value].dtype };
    });
  }

  /**
   * The caller may reuse its arrays as soon as `run()` returns: a program that reads its
   * arguments later (after an await) gets copies of the caller's. So do repeated runs of a
   * program that reads them on call but has no `runResident`: each repetition calls it again.
   */
  #snapshot(
    args: (RefTensor | DeviceTensor)[],
    inputs: InputMap,
    repeat: number,
  ): (RefTensor | DeviceTensor)[] {
    const once = repeat === 1 || this.#program.runResident !== undefined;
    if (this.#program.readsArgsOnCall && once) return args;
    const theirs = new Set(
      Object.values(inputs).map((t) => (t as { data?: unknown } | undefined)?.data),
    );
    return args.map((a) =>
      a instanceof DeviceTensor || !theirs.has(a.data) ? a : { ...a, data: a.data.slice() }
    );
  }

  /** The declared spec of input `i`, with axis 0 set to the active extent when it is bucketed. */
  #bucketed(i: GraphInput, active: number | undefined): GraphInput {
    if (active === undefined || !this.#init.buckets!.inputs.includes(i.name)) return i;
    return { ...i, shape: [active, ...i.shape.slice(1)] };
  }
}
