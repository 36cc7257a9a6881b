/**
 * Broadcasting in runs: where a small tensor (a scale, a zero point) repeats over a large one in
 * runs of consecutive elements, the runs' length agrees with the element-by-element offsets;
 * elsewhere there is none.
 *
 * @module
 */
import assert from "node:assert/strict";
import { broadcastOffsets, broadcastRun, type Shape, sizeOf } from "./shape.ts";

/** Each element's offset into `shape` as the runs give it. */
function fromRuns(shape: Shape, out: Shape, run: number): number[] {
  return Array.from({ length: sizeOf(out) }, (_, i) => Math.floor(i / run) % sizeOf(shape));
}

Deno.test("broadcastRun: per tensor, per leading channel and per trailing column, as the offsets", () => {
  const cases: [Shape, Shape, number][] = [
    [[], [2, 3, 4], 24],
    [[1, 1], [2, 3], 6],
    [[3, 1, 1], [3, 2, 2], 4],
    [[1, 3, 1], [2, 3, 4], 4],
    [[4], [2, 3, 4], 1],
    [[3, 4], [2, 3, 4], 1],
  ];
  for (const [shape, out, run] of cases) {
    assert.equal(broadcastRun(shape, out), run, `${shape} to ${out}`);
    const offsets = broadcastOffsets(shape, out);
    const want = offsets ? [...offsets] : Array.from({ length: sizeOf(out) }, (_, i) => i);
    assert.deepEqual(fromRuns(shape, out, run), want, `${shape} to ${out}`);
  }
  // A gap between its axes (C and W, not H): no runs.
  assert.equal(broadcastRun([3, 1, 4], [3, 2, 4]), undefined);
});
