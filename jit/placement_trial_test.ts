import assert from "node:assert/strict";
import { HOST_MARGIN, type Verdict, verdictOf } from "./placement_trial.ts";

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
