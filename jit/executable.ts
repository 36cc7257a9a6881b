/**
 * {@linkcode Executable}: a compiled graph bound to a backend, with its parameters. `run` checks
 * every input against the graph's declarations before anything executes, so bad data gets a clear
 * error and the executable stays usable; results come back through a {@linkcode RunHandle} as
 * fresh arrays that never alias the caller's inputs.
 *
 * @module
 */
import type { Backend, KernelTime, Program } from "../backends/backend.ts";
import type { RefTensor } from "../backends/reference/tensor_io.ts";
import { type TensorData, widenToI64 } from "./dtype.ts";
import { KilnError } from "./errors.ts";
import type { Graph, GraphInput } from "./graph.ts";
import { acceptInput, type HostTensor } from "./host_tensor.ts";
import type { KernelIR } from "./kernel_ir.ts";
import type { MemoryPlan } from "./memory_plan.ts";
import { RunHandle } from "./run_handle.ts";
import type { Schedule } from "./schedule.ts";
import { count } from "./telemetry.ts";
import type { BucketPlan } from "./buckets.ts";

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

/** Named host tensors: a run's inputs or results. */
export type TensorMap = Record<string, HostTensor>;

/** Options for {@linkcode Executable.run}. */
export interface RunOptions {
  /** Output names to read back (default: all). */
  readonly outputs?: readonly string[];
}

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
  /** Shape buckets: which inputs may run with a smaller axis 0, and what follows them. */
  readonly buckets?: BucketPlan;
}

/** A compiled graph. */
export class Executable {
  /** The graph this executable was compiled from. */
  readonly graph: Graph;
  /** The backend it runs on. */
  readonly backend: Backend;
  /** Milliseconds spent compiling. */
  readonly compileMs: number;
  /** The fused plan, when the backend compiled kernel IR. */
  readonly plan?: PlanInfo;
  /** State bindings: output name → the input it refreshes after every run. */
  readonly state: Readonly<Record<string, string>>;
  #init: ExecutableInit;
  #program: Program;
  #params = new Map<string, TensorData>();
  #stateData = new Map<string, TensorData>();
  #queue: Promise<unknown> = Promise.resolve();
  #disposed = false;

  /** Wraps a compiled program; use `compile()` rather than calling this. */
  constructor(init: ExecutableInit) {
    this.graph = init.graph;
    this.backend = init.backend;
    this.compileMs = init.compileMs;
    this.plan = init.plan;
    this.state = init.state ?? {};
    this.#init = init;
    this.#program = init.program;
    for (const p of init.graph.params) if (p.data) this.#params.set(p.name, p.data);
    this.#checkState();
  }

  /** A copy sharing the compiled program (no recompile) with its own params and state. */
  clone(): Executable {
    this.#check();
    const copy = new Executable(this.#init);
    for (const [k, v] of this.#params) copy.#params.set(k, v);
    for (const [k, v] of this.#stateData) copy.#stateData.set(k, v);
    return copy;
  }

  /**
   * Runs several input sets back to back (state bindings flow from one to the next) and returns
   * one handle per set; all are in flight at once, results arrive in order.
   */
  runPipelined(inputSets: readonly TensorMap[], options?: RunOptions): RunHandle<TensorMap>[] {
    return inputSets.map((inputs) => {
      const turn = this.#queue.then(() => this.run(inputs, options).result());
      this.#queue = turn.catch(() => {});
      return new RunHandle(turn);
    });
  }

  /** Names of the inputs `run` expects. */
  get inputNames(): string[] {
    return this.graph.inputs.map((i) => i.name);
  }

  /** Names of the outputs `run` returns. */
  get outputNames(): string[] {
    return this.graph.outputs.map((o) => o.name);
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
    const t = ArrayBuffer.isView(value) ? { data: value, shape: p.shape, dtype: p.dtype } : value;
    const accepted = acceptInput(t, p, `param "${name}"`);
    this.#params.set(name, accepted.data === t.data ? accepted.data.slice() : accepted.data);
  }

  /** Runs the graph on `inputs`; await the handle (or poll it) for the outputs. */
  run(inputs: TensorMap, options?: RunOptions): RunHandle<TensorMap> {
    this.#check();
    const active = this.#activeExtent(inputs);
    const args = this.#arguments(inputs, active);
    const requested = this.#outputs(options?.outputs);
    const stateOutputs = this.graph.outputs.flatMap((
      o,
      i,
    ) => (o.name in this.state && !requested.includes(i) ? [i] : []));
    const wanted = [...requested, ...stateOutputs];
    const given = new Set<TensorData>(args.map((a) => a.data));
    count("kiln_runs_total");
    count("kiln_dispatches_total", this.plan?.kernels.length ?? this.graph.nodes.length);
    for (const t of this.plan?.schedule.transfers ?? []) {
      count("kiln_transfers_total");
      if (t.from === "host") count("kiln_bytes_uploaded_total", t.bytes);
      if (t.to === "host") count("kiln_bytes_downloaded_total", t.bytes);
    }
    const buckets = this.#init.buckets;
    const partial = buckets && active !== undefined && active < buckets.bound ? active : undefined;
    const promise = this.#program.run(args, wanted, partial).then((data) => {
      wanted.forEach((idx, k) => {
        const name = this.graph.outputs[idx].name;
        if (name in this.state) this.#stateData.set(this.state[name], data[k].slice());
      });
      const out: TensorMap = {};
      requested.forEach((idx, k) => {
        const o = this.graph.outputs[idx];
        const v = this.graph.values[o.value];
        let shape = v.shape;
        let d = given.has(data[k]) ? data[k].slice() : data[k];
        if (partial !== undefined && buckets!.batched.has(o.value)) {
          shape = [v.shape[0] / buckets!.bound * partial, ...v.shape.slice(1)];
          d = d.slice(0, shape.reduce((a, b) => a * b, 1));
        }
        out[o.name] = {
          data: o.dtype === "i64" ? widenToI64(d as Int32Array) : d,
          shape,
          dtype: o.dtype,
        };
      });
      return out;
    });
    return new RunHandle(promise);
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
    this.#program.dispose();
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
  #activeExtent(inputs: TensorMap): number | undefined {
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

  #arguments(inputs: TensorMap, active?: number): RefTensor[] {
    if (typeof inputs !== "object" || inputs === null) {
      throw new KilnError(
        `run() expects an object of named inputs, got ${inputs === null ? "null" : typeof inputs}`,
        {
          code: "bad-input",
          fix: `pass { ${this.inputNames.map((n) => `${n}: HostTensor`).join(", ")} }`,
        },
      );
    }
    const expected = new Set(this.inputNames);
    const unknown = Object.keys(inputs).filter((k) => !expected.has(k));
    const missing = this.inputNames.filter((k) => !(k in inputs) && !this.#stateData.has(k));
    if (unknown.length || missing.length) {
      const parts = [
        missing.length ? `missing ${missing.join(", ")}` : "",
        unknown.length ? `unknown ${unknown.join(", ")}` : "",
      ];
      throw new KilnError(
        `run() inputs do not match the graph: ${parts.filter(Boolean).join("; ")}`,
        {
          code: "bad-input",
          fix: `pass exactly: ${this.inputNames.join(", ") || "no inputs"}`,
        },
      );
    }
    const args: RefTensor[] = this.graph.inputs.map((i) =>
      i.name in inputs || !this.#stateData.has(i.name)
        ? acceptInput(inputs[i.name], this.#bucketed(i, active), `input "${i.name}"`)
        : {
          data: this.#stateData.get(i.name)!,
          shape: i.shape,
          dtype: this.graph.values[i.value].dtype,
        }
    );
    for (const p of this.graph.params) {
      const data = this.#params.get(p.name);
      if (!data) {
        throw new KilnError(`Parameter "${p.name}" has no data`, {
          code: "bad-input",
          fix: `call setParam("${p.name}", data) before run()`,
        });
      }
      args.push({ data, shape: p.shape, dtype: this.graph.values[p.value].dtype });
    }
    return args;
  }

  /** The declared spec of input `i`, with axis 0 set to the active extent when it is bucketed. */
  #bucketed(i: GraphInput, active: number | undefined): GraphInput {
    if (active === undefined || !this.#init.buckets!.inputs.includes(i.name)) return i;
    return { ...i, shape: [active, ...i.shape.slice(1)] };
  }

  #outputs(names: readonly string[] | undefined): number[] {
    if (!names) return this.graph.outputs.map((_, i) => i);
    return names.map((n) => {
      const i = this.graph.outputs.findIndex((o) => o.name === n);
      if (i < 0) {
        throw new KilnError(`No output "${n}"`, {
          code: "bad-input",
          fix: `request some of: ${this.outputNames.join(", ")}`,
        });
      }
      return i;
    });
  }
}
