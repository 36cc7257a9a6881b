/**
 * Baseline timings of the reference backend on the W1 chain and a square matmul. Later backends
 * add their own groups with peers; these numbers are the floor every compiled backend must beat.
 *
 * @module
 */
import { compile } from "../mod.ts";
import { GraphBuilder } from "../jit/frontend/graph_builder.ts";
import type { Executable } from "../jit/runtime/executable.ts";
import { uniform } from "../jit/support/random.ts";

function w1(n: number) {
  const b = new GraphBuilder();
  const x = b.input("x", [n]);
  const c = (v: number) => b.constant(v);
  const t = b.op("Mul", [
    b.op("Relu", [b.op("Add", [b.op("Mul", [x, c(1.5)]), c(0.5)])]),
    b.op("Sigmoid", [x]),
  ]);
  b.output("y", b.op("Sub", [t, b.op("Div", [b.op("Mul", [x, x]), c(8)])]));
  return b.build();
}

function matmul(n: number) {
  const b = new GraphBuilder();
  b.output("y", b.op("MatMul", [b.input("a", [n, n]), b.input("b", [n, n])]));
  return b.build();
}

const w1Exe: Executable = await compile(w1(1 << 20));
const w1Input = { x: { data: uniform(1 << 20, 1), shape: [1 << 20], dtype: "f32" as const } };
const mmExe: Executable = await compile(matmul(256));
const mmInput = {
  a: { data: uniform(256 * 256, 2), shape: [256, 256], dtype: "f32" as const },
  b: { data: uniform(256 * 256, 3), shape: [256, 256], dtype: "f32" as const },
};

Deno.bench("reference W1 1M", { group: "W1-1M" }, async () => {
  await w1Exe.run(w1Input);
});

Deno.bench("reference matmul 256", { group: "W2-256" }, async () => {
  await mmExe.run(mmInput);
});
