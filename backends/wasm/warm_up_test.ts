import assert from "node:assert/strict";
import type { RefTensor } from "../../jit/ir/host_tensor.ts";
import type { ArenaProgram } from "./arena_program.ts";
import { DeviceTensor } from "../../jit/runtime/device_tensor.ts";
import { warmedAtSecondRun, warmUp } from "./warm_up.ts";

/** A stand-in run: `ms` of this thread's time, no outputs. */
const busy = (ms: number) => {
  for (const t = performance.now(); performance.now() - t < ms;);
  return Promise.resolve([]);
};

Deno.test("a warm-up runs alone until runs get faster, then until the thread tuner decides", async () => {
  const calls: string[] = [];
  let tuned = 0, presumed = false;
  const program = {
    // Baseline code at 1 ms a run, optimized from the 8th run on at 0.4.
    runAlone: () => busy(calls.push("alone") < 8 ? 1 : 0.4),
    run: () => (calls.push("tuned"), tuned++, busy(0.4)),
    get settled() {
      return tuned >= 6 || presumed;
    },
    presumeAlone: () => void (presumed = true),
    splitPays: false,
  };
  await warmUp(program, [], [], 1000);
  const alone = calls.filter((c) => c === "alone").length;
  assert.ok(alone >= 11 && alone < 20, `${alone} runs alone`);
  assert.deepEqual(
    calls.slice(alone),
    new Array(6).fill("tuned"),
    "tuned runs after, until settled",
  );
  // The time at most alone, then half as long again at most through the tuner. Judged by when
  // each run starts, not by counts: a loaded machine runs fewer 1 ms runs in 20 ms.
  const starts: [string, number][] = [];
  tuned = 0;
  program.runAlone = () => (starts.push(["alone", performance.now()]), busy(1));
  program.run = () => (starts.push(["tuned", performance.now()]), busy(1));
  const t0 = performance.now();
  await warmUp(program, [], [], 20);
  const solo = starts.filter(([c]) => c === "alone").map(([, t]) => t - t0);
  const later = starts.filter(([c]) => c === "tuned").map(([, t]) => t - t0);
  assert.ok(solo.length >= 2 && solo.every((t) => t < 20.5), `alone at ${solo}`);
  assert.ok(later.length > 0 && later[0] >= 20 - 1e-3, `tuned from ${later[0]}`);
  assert.ok(later.every((t) => t < later[0] + 10.5), `tuned at ${later}`);
  assert(!presumed, "1 ms runs are worth threads");
  // Optimized runs shorter than a hand-off to the workers (0.1 ms): one thread is presumed, and
  // the tuner takes no runs to decide.
  calls.length = 0;
  tuned = 0;
  program.runAlone = () => busy(calls.push("alone") < 8 ? 1 : 0.1);
  await warmUp(program, [], [], 1000);
  assert(presumed && tuned === 0 && calls.length >= 11, `${calls.length} runs, ${tuned} tuned`);
  // Unless a kernel has work enough to split on its own: then the tuner decides.
  presumed = false;
  tuned = 0;
  calls.length = 0;
  program.splitPays = true;
  program.run = () => (calls.push("tuned"), tuned++, busy(0.1));
  await warmUp(program, [], [], 1000);
  assert(!presumed && tuned === 6, `presumed ${presumed}, ${tuned} tuned`);
});

/**
 * A stand-in program: what it was asked to run, in order. Its second tuned run reaches a thread
 * verdict, stored a few milliseconds later.
 */
function recorder() {
  const calls: string[] = [];
  let tuned = 0;
  let noted: Promise<void> | undefined;
  const program = {
    runAlone: (args: readonly RefTensor[]) => {
      calls.push(`alone ${args[0].data[0]}`);
      // Longer than a tiny program's run (0.02 ms), however fast the machine: one that short
      // ends its warm-up after one run.
      for (const t = performance.now(); performance.now() - t < 0.05;);
      return Promise.resolve([args[0].data]);
    },
    run: (args: readonly RefTensor[]) => {
      calls.push(`run ${args[0].data[0]}`);
      if (++tuned === 2) {
        noted = new Promise((r) => setTimeout(() => r(void calls.push("noted")), 5));
      }
      return Promise.resolve([args[0].data]);
    },
    runResident: (args: readonly (RefTensor | DeviceTensor)[], _: readonly number[], o) => {
      const a = args[0];
      calls.push(
        `resident ${o.alone ? "alone" : "tuned"} ${
          a instanceof DeviceTensor ? "device" : a.data[0]
        }`,
      );
      return Promise.resolve([]);
    },
    get settled() {
      return tuned >= 2;
    },
    presumeAlone: () => {},
    splitPays: false,
    tuning: undefined,
    get noted() {
      return noted;
    },
    dispose: () => void calls.push("dispose"),
  } satisfies ArenaProgram;
  return { program, calls };
}

const tensor = (v: number): RefTensor => ({
  data: new Float32Array([v]),
  shape: [1],
  dtype: "f32",
});

Deno.test("a program warms up at its second run: the first result does not wait for it", async () => {
  const { program, calls } = recorder();
  let zeros = 0;
  const warmed = warmedAtSecondRun(program, () => (zeros++, [tensor(0)]), [0], 5);
  await warmed.run([tensor(1)], [0]);
  assert.deepEqual(calls, ["alone 1"], "the first run goes alone, at once");
  assert.equal(zeros, 0, "no zeros made before the warm-up");
  // The second run, and a third made meanwhile, wait for the warm-up; their arguments are copies.
  const x = tensor(2);
  const second = warmed.run([x], [0]);
  const third = warmed.run([tensor(3)], [0]);
  x.data[0] = 9;
  assert.deepEqual(await second, [new Float32Array([2])]);
  await third;
  assert.equal(zeros, 1);
  const warmUpRuns = calls.slice(1, -3);
  assert.ok(warmUpRuns.length >= 2, `warm-up runs: ${warmUpRuns}`);
  assert.ok(warmUpRuns.every((c) => c.endsWith(" 0")), "the warm-up runs on zeros");
  assert.deepEqual(calls.slice(-3), ["noted", "run 2", "run 3"], "the verdict stored first");
  // Later runs go straight through.
  calls.length = 0;
  await warmed.run([tensor(4)], [0]);
  assert.deepEqual(calls, ["run 4"]);
  warmed.dispose();
  assert.deepEqual(calls, ["run 4", "dispose"]);
});

Deno.test("runs on device memory go through the warm-up as host runs do", async () => {
  const { program, calls } = recorder();
  const warmed = warmedAtSecondRun(program, () => [tensor(0)], [0], 5);
  const once = { repeat: 1, feedback: [], keep: [true] };
  await warmed.runResident([tensor(1)], [0], once);
  assert.deepEqual(calls, ["resident alone 1"], "the first run goes alone, at once");
  const x = tensor(2);
  const second = warmed.runResident([x], [0], once);
  x.data[0] = 9;
  await second;
  assert.deepEqual(calls.slice(-2), ["noted", "resident tuned 2"], "after the warm-up, on a copy");
  calls.length = 0;
  await warmed.runResident([tensor(4)], [0], once);
  assert.deepEqual(calls, ["resident tuned 4"], "then straight through");
});

Deno.test("a program too heavy for a warm-up runs straight through; warmUp() makes its first run on zeros", async () => {
  const heavy = recorder();
  let zeros = 0;
  const straight = warmedAtSecondRun(heavy.program, () => (zeros++, [tensor(0)]), [0], 0);
  await straight.run([tensor(1)], [0]);
  await straight.run([tensor(2)], [0]);
  await straight.warmUp!();
  assert.deepEqual(heavy.calls, ["run 1", "run 2"], "no warm-up once the caller ran it");
  assert.equal(zeros, 0);
  // Asked before any run (a generation's decode step, inside prefill): one run alone on zeros,
  // then tuned runs on them until the thread tuner decides (the recorder's second), and a run
  // made meanwhile waits for it.
  const asked = recorder();
  const warmed = warmedAtSecondRun(asked.program, () => (zeros++, [tensor(0)]), [0], 0);
  const warming = warmed.warmUp!();
  const first = warmed.run([tensor(1)], [0]);
  await warming;
  assert.deepEqual(await first, [new Float32Array([1])]);
  assert.deepEqual(asked.calls, ["alone 0", "run 0", "run 0", "noted", "run 1"]);
  assert.equal(zeros, 1);
  // A tuner that never decides: the warm-up stops after 16 tuned runs.
  const undecided = recorder();
  const never = { ...undecided.program, settled: false };
  await warmedAtSecondRun(never, () => [tensor(0)], [0], 0).warmUp!();
  const runs = undecided.calls.filter((c) => c !== "noted");
  assert.deepEqual(runs, ["alone 0", ...new Array(16).fill("run 0")]);
});

Deno.test("warmUp() warms a program before its first run, which then goes straight through", async () => {
  const { program, calls } = recorder();
  let zeros = 0;
  const warmed = warmedAtSecondRun(program, () => (zeros++, [tensor(0)]), [0], 5);
  const warming = warmed.warmUp!();
  // A run made meanwhile waits for it.
  const first = warmed.run([tensor(1)], [0]);
  await warming;
  assert.deepEqual(await first, [new Float32Array([1])]);
  assert.equal(zeros, 1);
  assert.ok(calls.slice(0, -2).every((c) => c.endsWith(" 0")), "the warm-up runs on zeros");
  assert.deepEqual(calls.slice(-2), ["noted", "run 1"]);
  calls.length = 0;
  await warmed.warmUp!();
  await warmed.run([tensor(2)], [0]);
  assert.deepEqual(calls, ["run 2"], "warm: nothing more");
});

Deno.test("the caller's first run counts toward the warm-up's budget", async () => {
  const calls: string[] = [];
  const program = {
    runAlone: () => (calls.push("alone"), busy(1)),
    run: () => (calls.push("run"), Promise.resolve([])),
    settled: true,
    presumeAlone: () => {},
    splitPays: false,
  };
  // A first run of 30 ms leaves 10 of a 40 ms warm-up: about ten 1 ms runs, not forty.
  const t0 = performance.now();
  await warmUp(program, [], [], 40, [30]);
  const took = performance.now() - t0;
  assert.ok(took < 20, `${took} ms`);
  assert.ok(calls.length >= 2 && calls.length <= 12, `${calls.length} runs`);
});

Deno.test("the warm-up computes on the params the runs pass, which are not copied", async () => {
  const { program } = recorder();
  const seen: (readonly RefTensor[])[] = [];
  const run = program.run;
  program.run = (args: readonly RefTensor[]) => (seen.push(args), run(args));
  const zeros = (params: readonly RefTensor[] = []) => [tensor(0), params[0] ?? tensor(0)];
  const weight = tensor(7);
  const warmed = warmedAtSecondRun(program, zeros, [0], 5, 1);
  await warmed.run([tensor(1), weight], [0]);
  await warmed.run([tensor(2), weight], [0]);
  // The warm-up's runs (zero input) and the second run itself all hold the caller's param.
  assert.ok(seen.length >= 3, `${seen.length} runs`);
  assert.ok(seen.every((args) => args[1] === weight), "the param as passed, never a copy");
  assert.deepEqual(seen.map((args) => args[0].data[0]).at(-1), 2);
  // warmUp() before any run takes the params it is given (the executable's).
  const asked = recorder();
  const given: (readonly RefTensor[] | undefined)[] = [];
  const heavy = warmedAtSecondRun(asked.program, (p) => (given.push(p), [tensor(0)]), [0], 0, 1);
  await heavy.warmUp!([weight]);
  assert.deepEqual(given, [[weight]]);
});
