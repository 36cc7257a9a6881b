/**
 * When and how long a compiled program runs before its caller's runs are timed by it: the
 * warm-up. V8 runs a module's code in its baseline tier until each function has run enough, and
 * the thread tuner needs runs of optimized code to compare; the warm-up gives it both, on zeros,
 * on the calling thread.
 *
 * It happens at the program's second run, not in the compile: the first run, alone on this
 * thread, is what the warm-up's first run was (every function's baseline code compiled and run
 * once), on the caller's data instead of zeros, so the first result comes back a warm-up sooner
 * and a program run once (`kiln run`) never pays for one. On the 2-core VM, kernel cache warm,
 * load + compile + first result (three processes each, taking turns with the warm-up in the
 * compile): shufflenet 196-201 -> 110-115 ms, vit_tiny 107-115 -> 58-66, unet 100 -> 61-65,
 * lstm2 91-98 -> 65-69, mlp 32 -> 23-25; their runs from the third on as fast as before.
 *
 * @module
 */
import type { RefTensor } from "../../jit/ir/host_tensor.ts";
import type { Graph } from "../../jit/ir/graph.ts";
import { estimateWork } from "../../jit/schedule/workload.ts";
import type { ArenaProgram } from "./arena_program.ts";
import { DeviceTensor } from "../../jit/runtime/device_tensor.ts";
import type { ArenaStorage } from "./arena_storage.ts";

/** `a` with its own copy of the data (the caller may change its array once `run` returns). */
const copied = (a: RefTensor): RefTensor => ({ ...a, data: a.data.slice() });

/** A device tensor's data as a host argument (the caller may dispose it once `run` returns). */
function hostCopy(t: DeviceTensor): RefTensor {
  const s = t.storage() as ArenaStorage;
  return { data: s.copy(0, t.size), shape: t.shape, dtype: s.dtype };
}

/**
 * Flops a millisecond of V8's baseline (unoptimized) code computes on one thread, about:
 * ResNet-18's 3.6 GFLOP ran 1.2 s before tier-up on the 2-core machine.
 */
const BASELINE_FLOPS_PER_MS = 3e6;

/**
 * Milliseconds a compiled program of `graph` is warmed up for, of `ms` asked: none where one
 * baseline run would outlast them. The warm-up's first run, on zeros and alone on the calling
 * thread, was all of it (ResNet-18 on 2 cores: 1.2 s of a 2.6 s first run, 0.6 s of compile and
 * 1.0 s of first run without it), and a heavy program's first real run tiers its kernels up too.
 */
export function warmUpBudget(graph: Graph, ms: number): number {
  return estimateWork(graph).flops > ms * BASELINE_FLOPS_PER_MS ? 0 : ms;
}

/** A warm-up lasts at most this many (baseline) runs' time. */
const RUNS_WORTH = 400;
/** Programs whose baseline runs take less are not warmed up. */
const TINY_MS = 0.02;
/**
 * Programs whose warm run on one thread takes less start on one thread: waking the workers and
 * handing off costs more. mlp on the 16-core host: 0.28 ms a run over runs 4-23 while the tuner
 * probed the threads, 0.16 ms once it chose one thread; lenet on 2 cores: 0.50 alone, 1.01 on two.
 */
const ALONE_MS = 0.25;

/**
 * Warms `program` up on `args`: first on this thread alone (see
 * {@linkcode ArenaProgram.runAlone}) for up to `ms` (or {@linkcode RUNS_WORTH} runs' time), until
 * its runs got faster — the fastest of the last five under 0.6 of the fastest of runs 2-6 (the
 * first also compiles each function's baseline code; single slow runs do not count) — then its
 * thread tuner until that has a verdict (half as long again at most), so that a caller's first
 * runs neither alternate between threads and one thread nor time code V8 has yet to optimize.
 * `before` holds the times of runs alone already made (the caller's first). Errors (a gather of
 * index 0 into an empty axis) end it: the caller's runs report them with real data.
 */
export async function warmUp(
  program: Pick<ArenaProgram, "run" | "runAlone" | "settled" | "presumeAlone" | "splitPays">,
  args: readonly RefTensor[],
  outputs: readonly number[],
  ms: number,
  before: readonly number[] = [],
): Promise<void> {
  if (ms <= 0) return;
  const times = [...before];
  // The runs before count as the warm-up's own, their time out of its budget.
  const start = performance.now() - times.reduce((a, b) => a + b, 0);
  let until = start + ms;
  try {
    while (performance.now() < until) {
      const t = performance.now();
      await program.runAlone(args, outputs);
      times.push(performance.now() - t);
      // At most some hundred runs' worth; none for a tiny program, whose runs cost microseconds
      // either way.
      if (times.length === 2) {
        if (times[1] < TINY_MS) return program.presumeAlone();
        until = Math.min(until, start + times[0] + RUNS_WORTH * times[1]);
      }
      if (
        times.length >= 11 && Math.min(...times.slice(-5)) < 0.6 * Math.min(...times.slice(1, 6))
      ) {
        break;
      }
    }
    if (times.length > 1 && Math.min(...times.slice(1)) < ALONE_MS && !program.splitPays) {
      program.presumeAlone();
    }
    // Half as long again at most: a verdict takes a dozen runs.
    const settle = performance.now() + (until - start) / 2;
    while (!program.settled && performance.now() < settle) await program.run(args, outputs);
  } catch {
    return;
  }
}

/**
 * Runs at most that a heavy program's warm-up makes on zeros for the thread tuner's verdict
 * (about 9 reach it: two to warm, one to wake the workers, three timings each way).
 */
const SETTLE_RUNS = 16;

/**
 * Runs `program` on `args` until its thread tuner has a verdict, at most
 * {@linkcode SETTLE_RUNS} times, a task boundary between runs so that workers spawned by a timer
 * start. A generation's decode step asks for it inside prefill: its tuner otherwise alternated
 * between the threads and one thread through the first generation's steps (a 0.5B decoder on
 * wasm, 12 of 16 cores: 24.0 tokens/s in a first generation, 43.4 warm).
 */
async function settle(
  program: Pick<ArenaProgram, "run" | "settled">,
  args: readonly RefTensor[],
  outputs: readonly number[],
): Promise<void> {
  for (let i = 0; i < SETTLE_RUNS && !program.settled; i++) {
    await program.run(args, outputs);
    await new Promise((resolve) => setTimeout(resolve, 0));
  }
}

/**
 * `program`, warmed up (see {@linkcode warmUp}) for `ms` at its second run. The first run goes
 * alone on this thread, as the warm-up's first run would, and its time counts toward the
 * warm-up; the second and any made while the warm-up lasts wait for it, on copies of their
 * arguments (the caller may change its arrays once `run` returns). `zeros` makes the warm-up's
 * arguments, only if it happens. `warmUp()` starts it before that (a generation's decode step,
 * compiled beside prefill: warmed at its second run, two of a small decoder's first steps took
 * 5 and 8 ms where the rest took 0.2). A program too heavy for a warm-up (`ms` 0) still makes
 * its first run on zeros when `warmUp()` asks, before its caller's (a 0.5B decoder's first decode
 * step on 2 cores took 2.7 s where the rest took 0.1), then the runs its thread tuner needs for
 * a verdict (see {@linkcode settle}).
 *
 * The warm-up computes on the params its runs pass (the last `params` arguments, which the
 * executable owns and the caller cannot change), not on zeros: `zeros(params)` makes its
 * arguments. On zero weights the first real run wrote every weight (a 0.5B decoder's first decode
 * step: 90 ms of writes on the 2-core VM, 140-170 ms a step on the 16-core host against 14).
 */
export function warmedAtSecondRun(
  program: ArenaProgram,
  zeros: (params?: readonly RefTensor[]) => readonly RefTensor[],
  outputs: readonly number[],
  ms: number,
  params = 0,
): ArenaProgram {
  let first: number | undefined;
  let warming: Promise<void> | undefined;
  const heavy = async (args: readonly RefTensor[]) => {
    await program.runAlone(args, outputs);
    await settle(program, args, outputs);
    await program.noted;
  };
  let warm = false, ran = false;
  const start = (given?: readonly RefTensor[]) =>
    warming ??= (ms <= 0
      ? heavy(zeros(given))
      : warmUp(program, zeros(given), outputs, ms, first === undefined ? [] : [first])
        .then(() =>
          program.noted
        ))
      .then(() => void (warm = true), () => void (warm = true));
  // A run straight on once warm (or of a heavy program while no warm-up is asked for), alone as
  // the first, else after the warm-up on copies of its arguments.
  const through = <T>(
    args: readonly (RefTensor | DeviceTensor)[],
    go: (args: readonly (RefTensor | DeviceTensor)[], alone: boolean) => Promise<T>,
  ): Promise<T> => {
    ran = true;
    if (warm || (ms <= 0 && warming === undefined)) return go(args, false);
    if (first === undefined && warming === undefined) {
      const start = performance.now();
      const result = go(args, true);
      first = performance.now() - start;
      return result;
    }
    // The verdict the warm-up reached is stored before the run goes on: the process may end
    // with any run after it.
    const own = args.length - params;
    const copies = args.map((a, i) =>
      i >= own ? a : a instanceof DeviceTensor ? hostCopy(a) : copied(a)
    );
    return start(params ? copies.slice(own) as RefTensor[] : undefined).then(() =>
      go(copies, false)
    );
  };
  return {
    readsArgsOnCall: true,
    run: (args, wanted, active, into) =>
      through(args, (a, alone) => {
        const host = a as readonly RefTensor[];
        return alone
          ? program.runAlone(host, wanted, active, into)
          : program.run(host, wanted, active, into);
      }),
    runResident: (args, wanted, options) =>
      through(args, (a, alone) => program.runResident(a, wanted, { ...options, alone })),
    // Now rather than at the second run: for a caller about to time runs of the program (a
    // heavy program's first run, unless one of the caller's made it).
    warmUp: (given) => (warm || (ms <= 0 && ran && !warming) ? Promise.resolve() : start(given)),
    runAlone: (args, wanted, active, into) => program.runAlone(args, wanted, active, into),
    get settled() {
      return program.settled;
    },
    get splitPays() {
      return program.splitPays;
    },
    presumeAlone: () => program.presumeAlone(),
    get tuning() {
      return program.tuning;
    },
    get noted() {
      return program.noted;
    },
    deviceTimes: () => program.deviceTimes?.() ?? [],
    dispose: () => program.dispose(),
  };
}
