import assert from "node:assert/strict";
import { broadcastIndex } from "./fold.ts";

Deno.test("broadcastIndex maps each element to its broadcast source", () => {
  const all = (shape: number[], sub: number[]) => {
    const at = broadcastIndex(shape, sub)!;
    return Array.from({ length: shape.reduce((p, d) => p * d, 1) }, (_, i) => at(i));
  };
  assert.deepEqual(all([2, 3], []), [0, 0, 0, 0, 0, 0]);
  assert.deepEqual(all([2, 3], [3]), [0, 1, 2, 0, 1, 2]);
  assert.deepEqual(all([2, 3], [2, 1]), [0, 0, 0, 1, 1, 1]);
  assert.deepEqual(all([2, 3], [2, 3]), [0, 1, 2, 3, 4, 5]);
  assert.deepEqual(all([2, 2, 2], [2, 1, 2]), [0, 1, 0, 1, 2, 3, 2, 3]);
  assert.equal(broadcastIndex([2, 3], [2]), undefined);
  assert.equal(broadcastIndex([3], [1, 3]), undefined);
});
