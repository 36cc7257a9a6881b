import assert from "node:assert/strict";
import type { KernelIR } from "../../jit/ir/kernel_ir.ts";
import { PlaceSwaps, type SwappablePlaces } from "./arena_places.ts";

/** next = f(s, x) and a count of x, in an arena: s at 16, x at 32, next at 48, n at 64. */
function program(): SwappablePlaces & { rebound: number[] } {
  const f32 = (value: number, n = 4) => ({ value, shape: [n], dtype: "f32" });
  const kernels = [
    { inputs: [f32(1), f32(2)], outputs: [f32(3)] },
    { inputs: [f32(2)], outputs: [f32(4, 1)] },
  ] as unknown as KernelIR[];
  const rebound: number[] = [];
  return {
    kernels,
    bindings: [{ value: 1, resident: false }, { value: 2, resident: true }],
    outputs: [3, 4],
    types: new Map([[1, { shape: [4], dtype: "f32" }], [2, { shape: [4], dtype: "f32" }], [
      3,
      { shape: [4], dtype: "f32" },
    ], [4, { shape: [1], dtype: "f32" }]]),
    offsets: new Map([[1, 16], [2, 32], [3, 48], [4, 64]]),
    places: [{ at: 16, dtype: "f32" }, { at: 32, dtype: "f32" }],
    addresses: [[16, 32, 48], [32, 64]],
    table: new Int32Array([16, 32, 48, 32, 64]),
    tableAt: [0, 3, 5],
    rebind: (n) => rebound.push(n),
    rebound,
  };
}

Deno.test("an argument trades its place for an output's of its type: offsets, places and both address tables", () => {
  const p = program();
  const swaps = new PlaceSwaps(p);
  assert.ok(swaps.swap(0, 48));
  assert.deepEqual(p.rebound, [], "kernels are bound anew once the run's swaps settle");
  swaps.settle();
  assert.deepEqual([p.offsets.get(1), p.offsets.get(3)], [48, 16]);
  assert.deepEqual(p.places[0], { at: 48, dtype: "f32" });
  assert.deepEqual(p.addresses, [[48, 32, 16], [32, 64]]);
  assert.deepEqual([...p.table], [48, 32, 16, 32, 64]);
  assert.deepEqual(p.rebound, [0], "only the kernel whose buffers moved");
  // And back, the next step.
  assert.ok(swaps.swap(0, 16));
  assert.deepEqual(p.addresses, [[16, 32, 48], [32, 64]]);
});

Deno.test("no swap with a param, another argument's place, or an output of another size", () => {
  const p = program();
  const swaps = new PlaceSwaps(p);
  assert.ok(!swaps.swap(1, 48), "a param keeps its place");
  assert.ok(!swaps.swap(0, 32), "another argument's place");
  assert.ok(!swaps.swap(0, 64), "an output of one element");
  assert.deepEqual(p.addresses, [[16, 32, 48], [32, 64]]);
  swaps.settle();
  assert.deepEqual(p.rebound, []);
});
