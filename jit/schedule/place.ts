/**
 * Placement, the stage between fusion and building: which backend runs each fused kernel, and
 * under `auto` which of the close alternatives is really fastest on this machine. The estimate
 * comes from the cost model ({@linkcode schedule}); where a device is involved, the plans within
 * {@linkcode TRIAL_RATIO} of it are built and timed ({@linkcode trialOf}), and the verdict is
 * stored for the next compile of the same graph here. Building and compiling are handed in
 * ({@linkcode PlacementHooks}), so this stage names neither.
 *
 * @module
 */
import type { Backend } from "../runtime/backend.ts";
import { type Executable, settleCompile } from "../runtime/executable.ts";
import { count } from "../runtime/counters.ts";
import type { KernelCache } from "../runtime/kernel_cache.ts";
import type { Graph } from "../ir/graph.ts";
import type { FusionResult } from "../passes/fuse.ts";
import { type BackendRates, knownRates } from "./cost_model.ts";
import {
  checkRuns,
  deviceFloorMs,
  HOST_MARGIN,
  hostFloorMs,
  storedVerdict,
  storeVerdict,
  trial,
  TRIAL_RATIO,
  trialKey,
  trialOf,
  type TrialRecord,
  type Verdict,
} from "./placement_trial.ts";
import { graphLevelChoice, type RatesOf } from "./policy.ts";
import {
  canRun,
  elidedBy,
  memorySpace,
  type Policy,
  type Schedule,
  schedule,
  UNKNOWN_RATES,
} from "./schedule.ts";
import { estimateWork } from "./workload.ts";

/** What placement is given: the fused graph and the backends and policy it is placed under. */
export interface PlacementInput {
  /** The legalized graph. */
  readonly legal: Graph;
  /** Its kernels. */
  readonly fusion: FusionResult;
  /** Every backend the compile considers. */
  readonly candidates: readonly Backend[];
  /** Those that can run some kernel under the policy. */
  readonly usable: readonly Backend[];
  /** Graph inputs that lie on a device when runs start (value → backend id). */
  readonly inputsOn?: ReadonlyMap<number, string>;
  /** Runs the caller expects of the executable, where it said (a workload hint). */
  readonly runs?: number;
  /** The placement policy. */
  readonly policy: Policy;
  /** Whether a backend was named (then nothing is weighed). */
  readonly named: boolean;
  /** Whether the executable keeps state (then nothing is timed). */
  readonly stateful: boolean;
  /** Whether it runs shape buckets (then nothing is timed, and no graph-level backend fits). */
  readonly bucketed: boolean;
  /** Where trial verdicts are kept. */
  readonly notes: KernelCache;
  /** When the compile started (`performance.now()`). */
  readonly start: number;
}

/** What placement asks of the compiler. */
export interface PlacementHooks {
  /** The executable of one placement of the kernels. */
  build(placed: Schedule): Promise<Executable>;
  /** The whole graph compiled as if `backend` were named (fused for its own limits). */
  compileAs(backend: Backend, reason: string): Promise<Executable>;
  /** The executable of a graph-level backend running the whole `legal` graph. */
  wholeGraph(backend: Backend, legal: Graph, reason: string): Promise<Executable>;
  /** Per backend, the rates its placement is estimated with. */
  rates: RatesOf;
}

/**
 * How many times the device's floor the host's least time for a graph must be for the device's
 * plan to be built and timed first ({@linkcode Placer.deviceFirst}).
 */
const DEVICE_FIRST_RATIO = 4;

const timedAgainst = (b: Backend, other: string) =>
  `auto: every kernel on "${b.id}", timed against ${other}`;

/** One compile's placement: its estimates, trials and stored verdicts. */
class Placer {
  #in: PlacementInput;
  #hooks: PlacementHooks;
  #trialKey?: string;
  #outputs: Set<number>;
  /** Values that start on the host: inputs, params and constants. */
  #hostValues: Set<number>;
  /** Backends with their own memory (a GPU), and those on the host. */
  #devices: Backend[];
  #host: Backend[];
  /** The host's SIMD backend, if any: the alternative every device plan is weighed against. */
  #hostSimd?: Backend;

  constructor(input: PlacementInput, hooks: PlacementHooks) {
    this.#in = input;
    this.#hooks = hooks;
    this.#outputs = new Set(input.legal.outputs.map((o) => o.value));
    const { legal, fusion } = input;
    this.#hostValues = new Set(
      [...legal.inputs, ...legal.params].map((b) => b.value).concat([...fusion.constants.keys()]),
    );
    this.#devices = input.usable.filter((b) => memorySpace(b) !== "host");
    this.#host = input.usable.filter((b) => memorySpace(b) === "host");
    this.#hostSimd = this.#host.find((b) => b.kind !== "cpu");
  }

  /** The key of this compile's trial, taken where a verdict is looked up or stored. */
  #key(): string {
    return this.#trialKey ??= trialKey(this.#in.legal, this.#in.usable, this.#in.runs);
  }

  /** Whether `b` can run every kernel, given the values it elides among them. */
  runsAll(b: Backend): boolean {
    const { kernels } = this.#in.fusion;
    const elided = elidedBy(b, kernels, this.#outputs);
    return kernels.every((k) => canRun(b, k, elided));
  }

  /** The placement of the kernels on `backends`, estimated with `rates`. */
  schedule(backends: readonly Backend[], policy: Policy, rates: BackendRates[]): Schedule {
    const { legal, fusion } = this.#in;
    return schedule({
      kernels: fusion.kernels,
      hostValues: this.#hostValues,
      outputs: this.#outputs,
      graph: legal,
      backends,
      policy,
      rates,
      inputsOn: this.#in.inputsOn,
    });
  }

  /** Every kernel on `b` (which runs them all), estimated with `rates`, for `reason`. */
  allOn(b: Backend, reason: string, rates = knownRates(b) ?? UNKNOWN_RATES): Schedule {
    return { ...this.schedule([b], { kind: "named", backend: b.id }, [rates]), reason };
  }

  /** `exe`, counted as this compile's result (a trial's choice for `reason`). */
  done(exe: Executable, reason?: string): Executable {
    settleCompile(exe, { compileMs: performance.now() - this.#in.start, reason });
    count("kiln_compiles_total");
    count("kiln_compile_ms_total", exe.compileMs);
    return exe;
  }

  /** `record`'s plan among `built` (`fallback` without one), the record stored, the rest disposed. */
  async keep(
    built: Map<Verdict, Executable>,
    record: TrialRecord | undefined,
    fallback: Verdict,
  ): Promise<Executable> {
    if (record) await storeVerdict(this.#key(), record, this.#in.notes);
    const exe = built.get(record?.verdict ?? fallback)!;
    for (const other of built.values()) if (other !== exe) other.dispose();
    return exe;
  }

  /**
   * The fastest of `plans`: the verdict of an earlier trial of this graph on this machine, else a
   * trial's (stored for the next compile); `fallback` where a plan fails to run. `syncMs`: see
   * {@linkcode trialOf}.
   */
  async fastest(plans: Map<Verdict, Schedule>, fallback: Verdict, syncMs: number) {
    const stored = await storedVerdict(this.#key(), this.#in.notes);
    if (stored && plans.has(stored)) return await this.#hooks.build(plans.get(stored)!);
    const { legal, runs } = this.#in;
    const { record, built } = await trialOf(plans, this.#hooks.build, legal, syncMs, runs);
    return await this.keep(built, record, fallback);
  }

  /**
   * Under auto, the host plan first where a device cannot beat it: a device that waits at least
   * its `readbackMs` a run (Deno's GPU: about 11 ms), and KERNEL_FLOOR_MS a kernel, cannot beat
   * a host plan that runs in less, so it is built and timed first, and where it is that fast the
   * device is neither calibrated nor tried (both took 0.2-0.3 s of every first run of a small
   * model on the H200 host). The executable, or whether the host plan was timed and lost.
   */
  async hostFirst(): Promise<{ exe?: Executable; hostTimed: boolean }> {
    const { policy, stateful, bucketed, candidates } = this.#in;
    const hostSimd = this.#hostSimd;
    const readback = Math.min(...this.#devices.map((b) => b.capabilities().readbackMs ?? 0));
    const floor = deviceFloorMs(readback, this.#in.fusion.kernels.length);
    if (
      policy.kind !== "auto" || stateful || bucketed || !(floor > 0 && floor < Infinity) ||
      !hostSimd ||
      this.#host.length !== 1 || !this.runsAll(hostSimd) ||
      !candidates.every((b) => b.codegen || !b.compile)
    ) return { hostTimed: false };
    // A device that runs every kernel, for a plan all on it.
    const rival = this.#devices.find((b) => !b.capabilities().software && this.runsAll(b));
    // A plan an earlier compile here found fastest (against the device's plan or its floor).
    const stored = rival && await storedVerdict(this.#key(), this.#in.notes);
    const earlier = (b: Backend) =>
      `auto: every kernel on "${b.id}", as an earlier compile on this machine found fastest`;
    const { compileAs } = this.#hooks;
    if (stored === "host") {
      return { exe: this.done(await compileAs(hostSimd, earlier(hostSimd))), hostTimed: false };
    }
    // A device that fails to build its plan now leaves the host's, timed as below.
    const chosen = stored === "device" && await compileAs(rival!, earlier(rival!)).catch(() => {});
    if (chosen) return { exe: this.done(chosen), hostTimed: false };
    const first = rival && await this.deviceFirst(rival, hostSimd, floor);
    if (first?.won) return { exe: this.done(first.exe), hostTimed: false };
    const exe = await compileAs(
      hostSimd,
      `auto: the host plan runs in less than the least readback of ${
        this.#devices.map((b) => b.id).join(", ")
      } and its kernels' dispatch (${floor.toFixed(1)} ms a run), so no device plan was tried`,
    );
    const record = await trial(new Map([["host", exe]]), this.#in.legal, this.#in.runs);
    if (record && record.ms.host! < HOST_MARGIN * floor) {
      // Kept for the next compile, which then times nothing (a warm `kiln run` timed it anew).
      if (rival) await storeVerdict(this.#key(), record, this.#in.notes);
      first?.exe.dispose();
      return { exe: this.done(exe), hostTimed: false };
    }
    if (!rival) {
      exe.dispose();
      return { hostTimed: true };
    }
    return { exe: await this.hostAgainst(exe, hostSimd, rival, first?.exe), hostTimed: true };
  }

  /**
   * The device's plan built and timed before the host's, where the graph's operations keep the
   * host busy for more than {@linkcode DEVICE_FIRST_RATIO} times the device's `floor` even at its
   * peak ({@linkcode hostFloorMs}): a device plan that runs in under HOST_MARGIN of that time
   * ({@linkcode checkRuns}: a few runs, not a trial's rounds) cannot lose, so no host plan is
   * built. (On the H200, auto's first run of BERT-base took 5.1 s against 0.87 s with the GPU
   * named, building its wasm plan and timing 150 ms runs of it; the GPU, idle meanwhile, had
   * clocked down, and auto's runs after the trial took 12.7 ms against 3.9.) The device's
   * executable and whether it won; `undefined` where it was not tried or could not be built.
   */
  async deviceFirst(
    rival: Backend,
    hostSimd: Backend,
    floor: number,
  ): Promise<{ exe: Executable; won: boolean } | undefined> {
    const flops = estimateWork(this.#in.legal).flops;
    const hostMs = hostFloorMs(flops, hostSimd.capabilities().threads);
    if (!(hostMs > DEVICE_FIRST_RATIO * floor)) return undefined;
    const reason =
      `auto: every kernel on "${rival.id}", whose runs took less than the ${
        hostMs.toFixed(1)
      } ms "${hostSimd.id}" needs at its peak for ${(flops / 1e9).toFixed(2)} GFLOP, so no host ` +
      "plan was built";
    const exe = await this.#hooks.compileAs(rival, reason).catch(() => undefined);
    if (!exe) return undefined;
    const timed = await checkRuns(exe, this.#in.legal);
    // Over the runs the caller expects, where it said: the first run's uploads count too.
    const runs = this.#in.runs;
    const perRun = timed &&
      (runs === undefined ? timed.ms : (timed.firstMs + (runs - 1) * timed.ms) / runs);
    const won = perRun !== undefined && perRun < HOST_MARGIN * hostMs;
    if (won) {
      await storeVerdict(
        this.#key(),
        { verdict: "device", ms: { device: timed!.ms } },
        this.#in.notes,
      );
    }
    return { exe, won };
  }

  /**
   * Slower than the device's floor, the host plan `exe` is timed against the device's as they
   * are: the calibration behind an estimate, which the trial would check anyway, was most of
   * auto's first run on Dawn (1.4-1.6 s of vit_tiny's and unet's). The host executable timed is
   * kept: a new one starts cold, on one thread (ResNet-18 timed 458 ms a run against 49); so is
   * the device's where {@linkcode deviceFirst} `built` it.
   */
  async hostAgainst(
    exe: Executable,
    hostSimd: Backend,
    rival: Backend,
    built?: Executable,
  ): Promise<Executable> {
    const plans = new Map<Verdict, Executable>([["host", exe]]);
    const against = timedAgainst(rival, `"${hostSimd.id}"`);
    try {
      plans.set("device", built ?? await this.#hooks.compileAs(rival, against));
    } catch { /* the device cannot build its plan: the host's stands */ }
    const kept = await this.keep(
      plans,
      plans.size > 1 ? await trial(plans, this.#in.legal, this.#in.runs) : undefined,
      "host",
    );
    return this.done(kept, kept === exe ? timedAgainst(hostSimd, `"${rival.id}"`) : against);
  }

  /**
   * The plan of least estimated time, and under auto its single-backend alternatives timed
   * against it. `hostTimed`: the host plan was timed already and lost only to the readback floor.
   */
  async byEstimate(hostTimed: boolean): Promise<Executable> {
    const { usable, policy, candidates, legal } = this.#in;
    // One backend runs every kernel and no whole-graph backend competes: there is nothing to
    // weigh, so nothing is calibrated (its probes' compiles and runs were part of every first
    // run).
    const sole = usable.length === 1 && policy.kind === "auto" &&
      !candidates.some((b) => !b.codegen && b.compile) && this.runsAll(usable[0]);
    const rates = sole
      ? [knownRates(usable[0]) ?? UNKNOWN_RATES]
      : await this.#hooks.rates(usable, policy);
    const placed = sole
      ? this.allOn(usable[0], `auto: only "${usable[0].id}" runs every kernel here`)
      : this.schedule(usable, policy, rates);
    if (!this.#in.named && !this.#in.bucketed) {
      const chosen = await graphLevelChoice(legal, candidates, placed, policy, this.#hooks.rates);
      if (chosen) return await this.#hooks.wholeGraph(chosen.backend, chosen.legal, chosen.reason);
    }
    const onHost = placed.placement.every((id) => id === this.#hostSimd?.id);
    const device = this.deviceOf(placed);
    const plans = this.alternatives(placed, { onHost, device, rates, hostTimed });
    if (plans.size === 1) return this.done(await this.#hooks.build(placed));
    // Timed against the readback already, the host plan need not be timed alone again.
    const syncMs = device && !hostTimed ? rates[usable.indexOf(device)].syncMs : 0;
    return this.done(await this.fastest(plans, onHost ? "host" : "plan", syncMs));
  }

  /** The device `placed` uses, else one with hardware that could. */
  deviceOf(placed: Schedule): Backend | undefined {
    const byId = new Map(this.#in.candidates.map((b) => [b.id, b]));
    return placed.placement.map((id) => byId.get(id)!).find((b) => memorySpace(b) !== "host") ??
      this.#devices.find((b) => !b.capabilities().software);
  }

  /**
   * `placed` and, under auto where a device is involved, its single-backend alternatives (all on
   * the host's SIMD backend, all on that device) whose estimates are within TRIAL_RATIO of it:
   * small programs are where estimates are least reliable, and a plan all on the host is timed
   * against the device's, as estimates err both ways (a miscalibrated GPU kept ResNet-18 on wasm
   * at 57 ms against the GPU's 31).
   */
  alternatives(
    placed: Schedule,
    how: {
      onHost: boolean;
      device: Backend | undefined;
      rates: readonly BackendRates[];
      hostTimed: boolean;
    },
  ): Map<Verdict, Schedule> {
    const { onHost, device, rates, hostTimed } = how;
    const plans = new Map<Verdict, Schedule>([[onHost ? "host" : "plan", placed]]);
    const { policy, stateful, bucketed } = this.#in;
    if (policy.kind !== "auto" || stateful || bucketed || !device) return plans;
    // `timed`: the host plan was timed already and lost only to the readback floor, so it is
    // tried whatever its estimate (Dawn's 0.2 ms floor let vit_tiny's 4 ms estimate on the GPU
    // skip a host plan that ran in 1 ms).
    const add = (b: Backend | undefined, verdict: Verdict, timed = false) => {
      const at = b ? this.#in.usable.indexOf(b) : -1;
      if (at < 0 || !this.runsAll(b!)) return;
      if (placed.placement.every((id) => id === b!.id)) return;
      const only = this.allOn(b!, timedAgainst(b!, "the least estimated time's plan"), rates[at]);
      if (timed || only.totalMs <= TRIAL_RATIO * placed.totalMs) plans.set(verdict, only);
    };
    add(this.#hostSimd, "host", hostTimed);
    add(device, "device");
    return plans;
  }
}

/**
 * The executable of the best placement of `input`'s kernels that this machine shows: estimated,
 * and under auto timed against its close alternatives (see the module's description).
 */
export async function place(input: PlacementInput, hooks: PlacementHooks): Promise<Executable> {
  const placer = new Placer(input, hooks);
  const { exe, hostTimed } = await placer.hostFirst();
  return exe ?? await placer.byEstimate(hostTimed);
}
