import assert from "node:assert/strict";
import type { Executable } from "../runtime/executable.ts";
import { GraphBuilder } from "../frontend/graph_builder.ts";
import {
  deviceFloorMs,
  HOST_MARGIN,
  KERNEL_FLOOR_MS,
  trial,
  trialOf,
  type Verdict,
  verdictOf,
} from "./placement_trial.ts";

const times = (entries: [Verdict, number[]][]) => new Map<Verdict, number[]>(entries);

Deno.test("a trial keeps the fastest median, and the host plan unless another beats it clearly", () => {
  // Medians 2, 1.5 and 3: the mixed plan is more than 10% faster than the host's.
  const clear = verdictOf(
    times([["plan", [1.4, 1.5, 9]], ["host", [2, 2.1, 1.9]], ["device", [3, 3, 3]]]),
  );
  assert.equal(clear.verdict, "plan");
  assert.deepEqual(clear.ms, { plan: 1.5, host: 2, device: 3 });
  // Within the margin the host plan stands: one outlier run does not move the median either.
  const near = verdictOf(times([["host", [1, 1, 50]], ["device", [0.95, 0.96, 0.94]]]));
  assert.ok(0.95 > HOST_MARGIN * 1);
  assert.equal(near.verdict, "host");
  // Without a host plan the fastest wins outright.
  assert.equal(verdictOf(times([["plan", [2]], ["device", [1.9]]])).verdict, "device");
});

Deno.test("a host plan faster than the device's sync wins without the other plans being built", async () => {
  const g = new GraphBuilder();
  g.output("y", g.op("Relu", [g.input("x", [4])]));
  const graph = g.build();
  // A plan "runs" in its milliseconds; building one records its verdict.
  type Plan = { verdict: Verdict; ms: number };
  const plans = (hostMs: number) =>
    new Map<Verdict, Plan>(
      ([["plan", 0.5], ["host", hostMs], ["device", 0.5]] as [Verdict, number][]).map((
        [verdict, ms],
      ) => [verdict, { verdict, ms }]),
    );
  const built: Verdict[] = [];
  const build = ({ verdict, ms }: Plan) => {
    built.push(verdict);
    const run = () => new Promise((done) => setTimeout(done, ms));
    return Promise.resolve({ run, dispose: () => {} } as unknown as Executable);
  };
  // Every device plan waits 30 ms a run: the 2 ms host plan wins, nothing else is built.
  const fast = await trialOf(plans(2), build, graph, 30);
  assert.equal(fast.record?.verdict, "host");
  assert.deepEqual(built, ["host"]);
  // A host plan slower than that is timed against the others, which are built then.
  built.length = 0;
  const slow = await trialOf(plans(40), build, graph, 30);
  assert.deepEqual(built, ["host", "plan", "device"]);
  assert.notEqual(slow.record?.verdict, "host");
});

Deno.test("a plan far slower than the fastest in a round runs no more rounds", async () => {
  const g = new GraphBuilder();
  g.output("y", g.op("Relu", [g.input("x", [4])]));
  const runs = new Map<Verdict, number>();
  const plan = (verdict: Verdict, ms: number) => {
    const run = () => {
      runs.set(verdict, (runs.get(verdict) ?? 0) + 1);
      return new Promise((done) => setTimeout(done, ms));
    };
    return { run, dispose: () => {} } as unknown as Executable;
  };
  // The 60 ms plan warms up for 150 ms (at most 3 runs), is timed once and left out after that:
  // five timed rounds would make it at least 6 runs.
  const record = await trial(
    new Map([["host", plan("host", 2)], ["plan", plan("plan", 60)]]),
    g.build(),
  );
  assert.equal(record?.verdict, "host");
  assert.ok(runs.get("plan")! <= 3 + 1, `${runs.get("plan")} runs`);
  assert.ok(runs.get("host")! >= 1 + 5);
  assert.ok(record!.ms.plan! >= 55);
});

Deno.test("a device's floor is its readback and a dispatch a kernel; none without a readback", () => {
  // Through Dawn the readback alone (0.2 ms) no longer bounds a plan of 51 small kernels, whose
  // dispatches take longer than the host's whole run (lstm2: 0.1 ms on wasm).
  assert.equal(deviceFloorMs(0.2, 51), 0.2 + 51 * KERNEL_FLOOR_MS);
  assert.ok(deviceFloorMs(0.2, 51) > 0.9);
  assert.equal(deviceFloorMs(11, 3), 11 + 3 * KERNEL_FLOOR_MS);
  assert.equal(deviceFloorMs(0, 51), 0);
  assert.equal(deviceFloorMs(Infinity, 51), Infinity);
});

Deno.test("fast plans are timed over more rounds, all of them, slow ones over five", async () => {
  const g = new GraphBuilder();
  g.output("y", g.op("Relu", [g.input("x", [4])]));
  const counted = (ms: number) => {
    const plan = { runs: 0, exe: undefined as unknown as Executable };
    const run = () => {
      plan.runs++;
      return ms ? new Promise((done) => setTimeout(done, ms)) : Promise.resolve();
    };
    plan.exe = { run, dispose: () => {} } as unknown as Executable;
    return plan;
  };
  // Runs of no time: a median of five of them was too noisy to place sub-millisecond programs.
  // Neither is dropped as hopeless, however their runs' noise compares in a round.
  const [host, device] = [counted(0), counted(0)];
  await trial(new Map([["host", host.exe], ["device", device.exe]]), g.build());
  assert.equal(host.runs, device.runs);
  assert.ok(host.runs > 10 + 5, `${host.runs} runs`);
  // 10 ms runs: ten warm-up runs, then rounds stop at five (they took over 25 ms).
  const slow = counted(10);
  await trial(new Map([["host", slow.exe]]), g.build());
  assert.equal(slow.runs, 10 + 5);
});
