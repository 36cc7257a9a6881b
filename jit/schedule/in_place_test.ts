import assert from "node:assert/strict";
import { GraphBuilder } from "../frontend/graph_builder.ts";
import type { Graph } from "../ir/graph.ts";
import { fuse } from "../passes/fuse.ts";
import { KilnError } from "../support/errors.ts";
import { donatedValues, inPlaceKernels } from "./in_place.ts";

/** `next` keeps `s` before slot `at` and takes `x` from there; `extra` adds outputs reading `s`. */
function update(extra?: (b: GraphBuilder, s: string, next: string) => void): Graph {
  const b = new GraphBuilder();
  const s = b.input("s", [3, 8]), x = b.input("x", [3, 1]), at = b.input("at", [1], "i32");
  const slots = b.constant(Int32Array.from({ length: 8 }, (_, j) => j), [1, 8], "i32");
  const keep = b.op("Less", [slots, b.op("Reshape", [at], { shape: [1, 1] })]);
  const next = b.op("Where", [keep, s, b.op("Expand", [x], { shape: [3, 8] })]);
  b.output("next", next);
  extra?.(b, s.name, next.name);
  return b.build();
}

/** The (output name, input name) pairs `graph`'s kernels mark, donating `names`. */
function marked(graph: Graph, names: readonly string[]): string[][] {
  const { kernels } = fuse(graph);
  const name = (v: number) => graph.values[v].name;
  const donated = donatedValues(names, graph);
  const outputs = new Set(graph.outputs.map((o) => o.value));
  return inPlaceKernels(kernels, donated, outputs).flatMap((k) =>
    (k.inPlace ?? []).map((p) => [name(k.outputs[p.output].value), name(k.inputs[p.input].value)])
  );
}

Deno.test("in place: a donated input's point-for-point successor may take its buffer", () => {
  const graph = update();
  const next = graph.outputs[0].value;
  assert.deepEqual(marked(graph, ["s"]), [[graph.values[next].name, "s"]]);
  assert.deepEqual(marked(graph, []), [], "nothing donated");
  assert.deepEqual(marked(graph, ["x"]), [], "x is read broadcast, not point for point");
});

Deno.test("in place: not where the input is read at other points, later, or handed back", () => {
  const shifted = update((b, s) =>
    b.output("first", b.op("Slice", [s], { starts: [1], ends: [2], axes: [1] }))
  );
  assert.deepEqual(marked(shifted, ["s"]), [], "a point read after it is written");
  const before = update((b, s) => b.output("total", b.op("ReduceSum", [s], { keepdims: 0 })));
  assert.equal(marked(before, ["s"]).length, 1, "a kernel before it reads the input as it was");
  // A kernel after the update that reads the input (here: the update again, into a value of its own).
  const graph = update(), { kernels } = fuse(graph), s = graph.inputs[0].value;
  const writer = kernels.find((k) => k.inputs.some((b) => b.value === s))!;
  const again = { ...writer, outputs: writer.outputs.map((o) => ({ ...o, value: -1 })) };
  const outputs = new Set(graph.outputs.map((o) => o.value));
  const later = inPlaceKernels([...kernels, again], new Set([s]), outputs);
  assert.ok(later.every((k) => !k.inPlace), "a kernel after it reads the input");
  const back = update((b, s) => b.output("same", s));
  assert.deepEqual(marked(back, ["s"]), [], "an output is the input itself");
});

Deno.test("in place: donate takes the graph's input names", () => {
  const graph = update();
  for (const bad of ["s", ["y"], [3]]) {
    assert.throws(
      () => donatedValues(bad, graph),
      (e: unknown) => e instanceof KilnError && e.code === "bad-input" && /Fix:/.test(e.message),
    );
  }
  assert.throws(() => donatedValues(["s"], graph, { next: "s" }), /state binding/);
});

Deno.test("in place: readers in a group of their own come first; a writer in a group takes none", () => {
  const graph = update((b, s) => b.output("total", b.op("ReduceSum", [s], { keepdims: 0 })));
  const s = graph.inputs[0].value, outputs = new Set(graph.outputs.map((o) => o.value));
  const { kernels } = fuse(graph);
  const writer = kernels.findIndex((k) =>
    k.outputs.some((o) => o.value === graph.outputs[0].value)
  );
  const reader = kernels.findIndex((k, i) => i !== writer && k.inputs.some((b) => b.value === s));
  assert.ok(reader >= 0 && reader < writer);
  // The reader in a group (attention's, run share by share as one job): done before the writer.
  const readerGrouped = kernels.map((k, i) => (i === reader ? { ...k, group: "attention_0" } : k));
  const marks = inPlaceKernels(readerGrouped, new Set([s]), outputs);
  assert.equal(marks[writer].inPlace?.length, 1);
  // The writer in a group: a member before it may still read another thread's share.
  const writerGrouped = kernels.map((k, i) => (i === writer ? { ...k, group: "attention_0" } : k));
  assert.ok(inPlaceKernels(writerGrouped, new Set([s]), outputs).every((k) => !k.inPlace));
});

Deno.test("in place: a new entry read under the capacity's broadcast is computed in its kernel", () => {
  // A decode step's cache: the past kept where it lies, the rotated entry written at its slot.
  const b = new GraphBuilder();
  const past = b.input("past", [2, 8, 4]), entry = b.input("entry", [2, 1, 4]);
  const at = b.input("at", [1], "i32");
  const slots = b.constant(Int32Array.from({ length: 8 }, (_, j) => j), [1, 8, 1], "i32");
  const rotated = b.op("Tanh", [b.op("Sin", [b.op("Exp", [entry])])]);
  const keep = b.op("Not", [b.op("Equal", [slots, at])]);
  b.output("present", b.op("Where", [keep, past, rotated]));
  const graph = b.build();
  const donated = donatedValues(["past"], graph);
  // Donated, the entry is computed only at the slot the kernel writes: no kernel of its own.
  assert.equal(fuse(graph, { donated, keptStores: true }).kernels.length, 1);
  // A backend that would compute it at every point stores it first.
  assert.equal(fuse(graph, { donated }).kernels.length, 2);
  const apart = fuse(graph);
  assert.equal(apart.kernels.length, 2);
  assert.ok(apart.log.some((l) => /broadcast \(recomputation\)/.test(l)));
  // Any other input donated changes nothing.
  const entryOnly = donatedValues(["entry"], graph);
  assert.equal(fuse(graph, { donated: entryOnly, keptStores: true }).kernels.length, 2);
});
