import assert from "node:assert/strict";
import { affineOffset, linearSuffix, strideOver } from "./access.ts";
import type { IndexStep } from "./kernel_ir.ts";

// A 3-wide window over a row of 8: out[i, k] = x[i + k], i < 6, k < 3.
const window = (offset: number): IndexStep => ({
  kind: "affine",
  coeff: [[1, 1]],
  offset: [offset],
  bounds: [8],
  fill: 0,
});

Deno.test("affineOffset composes steps; bounds count only where some point can leave them", () => {
  assert.deepEqual(affineOffset([window(0)], [6, 3], [8]), { weights: [1, 1], base: 0 });
  // With padding 1 the first and last windows read the fill: not affine.
  assert.equal(affineOffset([window(-1)], [6, 3], [8]), undefined);
  assert.equal(affineOffset([window(0)], [7, 3], [8]), undefined);
  // A transpose then a final reshape: the offset is the linear index into the transposed shape.
  const transpose: IndexStep = { kind: "affine", coeff: [[0, 1], [1, 0]], offset: [0, 0] };
  assert.deepEqual(
    affineOffset([transpose, { kind: "reshape", from: [3, 2], to: [6] }], [2, 3], [6]),
    { weights: [1, 2], base: 0 },
  );
  // A reshape followed by more steps is not affine in general.
  assert.equal(
    affineOffset([{ kind: "reshape", from: [2, 3], to: [3, 2] }, transpose], [2, 3], [2, 3]),
    undefined,
  );
});

Deno.test("strideOver and linearSuffix find the axes a pointer can walk", () => {
  const rowMajor = { weights: [4, 1], base: 0 }, bias = { weights: [0, 1], base: 0 };
  assert.equal(strideOver(rowMajor, [0, 1], [3, 4]), 1);
  assert.equal(strideOver(bias, [0, 1], [3, 4]), undefined);
  assert.equal(strideOver(bias, [1], [3, 4]), 1);
  assert.deepEqual(linearSuffix([rowMajor, bias], [3, 4]), [1]);
  assert.deepEqual(linearSuffix([rowMajor], [3, 4]), [0, 1]);
});
