import assert from "node:assert/strict";
import type { KernelIR } from "../ir/kernel_ir.ts";
import { planMemory } from "./memory_plan.ts";

/** A kernel reading and writing f32 values of the given element counts (all the plan looks at). */
const kernel = (inputs: [number, number][], outputs: [number, number][]) =>
  ({
    inputs: inputs.map(([value, n]) => ({ value, shape: [n], dtype: "f32" })),
    outputs: outputs.map(([value, n]) => ({ value, shape: [n], dtype: "f32" })),
  }) as unknown as KernelIR;

const MB = 1 << 18; // elements in a MiB of f32

Deno.test("a small value does not take a large free slot that a large value needs next", () => {
  // v1 (4 MiB) is read once by k1; v4 (a few floats) lives to the end; v5 (4 MiB) comes after
  // v4. Placed in v1's freed slot, v4 left v5 a new 4 MiB slot.
  const kernels = [
    kernel([], [[1, 4 * MB]]),
    kernel([[1, 4 * MB]], [[2, 4 * MB]]),
    kernel([], [[4, 16]]),
    kernel([[2, 4 * MB]], [[5, 4 * MB]]),
    kernel([[4, 16], [5, 4 * MB]], [[6, 16]]),
  ];
  const plan = planMemory(kernels, new Set([6]));
  assert.equal(plan.slots.length, 3);
  assert.equal(plan.plannedBytes, 8 * 4 * MB + 64);
  assert.equal(plan.assignment.get(5), plan.assignment.get(1));
});

Deno.test("a value larger than every free slot grows the largest of them", () => {
  // v1 (1 MiB) freed, then v3 (3 MiB): one slot of 3 MiB, not two.
  const kernels = [
    kernel([], [[1, MB]]),
    kernel([[1, MB]], [[2, 16]]),
    kernel([[2, 16]], [[3, 3 * MB]]),
    kernel([[3, 3 * MB]], [[4, 16]]),
  ];
  const plan = planMemory(kernels, new Set([4]));
  assert.equal(plan.assignment.get(3), plan.assignment.get(1));
  assert.equal(plan.plannedBytes, 4 * 3 * MB + 64);
});

Deno.test("values read by kernels that run together keep their places until the last of them", () => {
  // k1 → k2 → k3, each read once by the next; alone, k3's output takes k1's freed place.
  const kernels = [
    kernel([], [[1, MB]]),
    kernel([[1, MB]], [[2, MB]]),
    kernel([[2, MB]], [[3, MB]]),
    kernel([[3, MB]], [[4, 16]]),
  ];
  const alone = planMemory(kernels, new Set([4]));
  assert.equal(alone.assignment.get(3), alone.assignment.get(1));
  // Run together share by share (a chain of k1-k3): another share may still read v1 or v2.
  const together = planMemory(kernels, new Set([4]), [2, 2, 2, 3]);
  const places = [1, 2, 3].map((v) => together.assignment.get(v));
  assert.equal(new Set(places).size, 3, `places ${places}`);
});

Deno.test("combined outputs share a few slots, a kernel's apart from the words it reads", () => {
  /** A kernel reading `inputs` (scalars) that combines the range of its [8] output into `words`. */
  const ranging = (inputs: number[], out: number, words: number[]) =>
    ({
      inputs: inputs.map((value) => ({ value, shape: [], dtype: "f32" })),
      outputs: [
        { value: out, shape: [8], dtype: "f32" },
        ...words.map((value) => ({ value, shape: [], dtype: "f32", combine: "max" })),
      ],
    }) as unknown as KernelIR;
  // Words 10, 11 of the first kernel; the second reads them and writes 12, 13; the third reads
  // 12 (not 10) and writes 14.
  const plan = planMemory(
    [ranging([], 1, [10, 11]), ranging([10, 11], 2, [12, 13]), ranging([12], 3, [14])],
    new Set(),
    [],
    256,
  );
  const at = (v: number) => [plan.assignment.get(v), plan.offsets.get(v)];
  assert.deepEqual([10, 11, 14].map(at), [[1, 0], [1, 256], [1, 512]]);
  const other = plan.assignment.get(12);
  assert.notEqual(other, 1);
  assert.deepEqual([12, 13].map(at), [[other, 0], [other, 256]]);
  // No other value ever takes a word slot.
  for (const v of [1, 2, 3]) assert.ok(![1, other].includes(plan.assignment.get(v)));
});
