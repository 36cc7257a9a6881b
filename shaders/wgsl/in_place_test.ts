import assert from "node:assert/strict";
import { GraphBuilder } from "../../jit/frontend/graph_builder.ts";
import type { Graph } from "../../jit/ir/graph.ts";
import type { KernelIR } from "../../jit/ir/kernel_ir.ts";
import { fuse } from "../../jit/passes/fuse.ts";
import { inPlaceKernels, keptForm } from "../../jit/schedule/in_place.ts";
import { generateWgsl, kernelLayout } from "./codegen.ts";
import { aliasedInputs } from "./in_place.ts";

const OPTIONS = { maxInvocations: 256 };

/** The kernel of `graph`'s one output, its first input donated. */
function donatedKernel(graph: Graph): KernelIR {
  const donated = new Set([graph.inputs[0].value]);
  const outputs = new Set(graph.outputs.map((o) => o.value));
  const kernels = inPlaceKernels(fuse(graph).kernels, donated, outputs);
  assert.equal(kernels.length, 1);
  return kernels[0];
}

/** A cache's step: the new entry where the slot is `at`, else the past as it lies. */
function cacheStep(): Graph {
  const b = new GraphBuilder();
  const past = b.input("past", [2, 8, 4]), entry = b.input("entry", [2, 1, 4]);
  const at = b.input("at", [1], "i32");
  const slots = b.constant(Int32Array.from([0, 1, 2, 3, 4, 5, 6, 7]), [1, 8, 1], "i32");
  b.output("present", b.op("Where", [b.op("Not", [b.op("Equal", [slots, at])]), past, entry]));
  return b.build();
}

Deno.test("a cache stored over its past binds one buffer and stores only the new entry", () => {
  const kernel = donatedKernel(cacheStep());
  const past = kernel.inputs.findIndex((b) => b.shape.join() === "2,8,4");
  assert.deepEqual(kernel.inPlace, [{ output: 0, input: past }]);
  assert.ok(keptForm(kernel, 0));
  const layout = kernelLayout(kernel, OPTIONS);
  // Conditional stores go a point at a time, though the last axis is a multiple of 4.
  assert.equal(layout.width, 1);
  assert.deepEqual([...aliasedInputs(kernel, layout)], [[past, 0]]);
  const wgsl = generateWgsl(kernel, OPTIONS);
  assert.doesNotMatch(wgsl, new RegExp(`var<storage, read> in${past}:`));
  assert.equal(wgsl.match(/@binding\(/g)?.length, kernel.inputs.length);
  assert.match(wgsl, /if \(v\d+ == 0u\) \{\n\s+(let .*\n\s+)*out0\[/);
  assert.doesNotMatch(
    wgsl,
    /out0\[[^\]]*\];/,
    "the past is never read: where it stays, nothing moves",
  );
});

Deno.test("an output stored over its input elsewhere reads it from its own binding, as vec4s", () => {
  const b = new GraphBuilder();
  const h = b.input("h", [4, 8]), u = b.input("u", [4, 8]);
  b.output("next", b.op("Add", [b.op("Mul", [h, b.constant(0.5)]), u]));
  const kernel = donatedKernel(b.build());
  assert.equal(keptForm(kernel, 0), undefined);
  const layout = kernelLayout(kernel, OPTIONS);
  assert.equal(layout.width, 4);
  assert.deepEqual([...aliasedInputs(kernel, layout)], [[0, 0]]);
  const wgsl = generateWgsl(kernel, OPTIONS);
  assert.match(wgsl, /@binding\(0\) var<storage, read> in1: array<vec4<f32>>/);
  assert.match(wgsl, /@binding\(1\) var<storage, read_write> out0: array<vec4<f32>>/);
  assert.match(wgsl, /= out0\[/);
});

Deno.test("without a donated input nothing is aliased", () => {
  const graph = cacheStep();
  const [kernel] = fuse(graph).kernels;
  const layout = kernelLayout(kernel, OPTIONS);
  assert.equal(aliasedInputs(kernel, layout).size, 0);
  assert.match(generateWgsl(kernel, OPTIONS), /var<storage, read> in0:/);
});
