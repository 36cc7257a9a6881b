/**
 * The dot tiles of wasm's f32 products: which products take them, and their values against the
 * reference for every row remainder (tiles of 6, 4, 2, 1 rows), a last panel narrower than 8,
 * K of an odd count of four-k steps, B as MatMul and as Gemm's transposed weight, an epilogue,
 * and the same bits on two threads as on one.
 *
 * @module
 */
import assert from "node:assert/strict";
import { compile } from "../../mod.ts";
import { fuse } from "../../jit/passes/fuse.ts";
import { GraphBuilder, type Sym } from "../../jit/frontend/graph_builder.ts";
import type { Graph } from "../../jit/ir/graph.ts";
import { uniform } from "../../jit/support/random.ts";
import { assertClose, f32, numbers } from "../../jit/testing/testing.ts";
import { WasmBackend } from "../../backends/wasm/wasm_backend.ts";
import { takesDots } from "./gemm_dot.ts";

/** The graph `y = build(x)` over x [rows, k]. */
function graphOf(rows: number, k: number, build: (b: GraphBuilder, x: Sym) => Sym): Graph {
  const b = new GraphBuilder();
  b.output("y", build(b, b.input("x", [rows, k])));
  return b.build();
}

/** `x · w` with w [k, n] a weight, then a bias and a Gelu. */
const linear = (k: number, n: number) => (b: GraphBuilder, x: Sym) => {
  const w = b.param("w", [k, n], "f32", uniform(k * n, 2));
  const y = b.op("Add", [b.op("MatMul", [x, w]), b.param("bias", [n], "f32", uniform(n, 3))]);
  return b.op("Gelu", [y]);
};

/** Gemm with its weight given [n, k] (`transB`, as PyTorch's Linear), beta 1. */
const gemm = (k: number, n: number) => (b: GraphBuilder, x: Sym) => {
  const w = b.param("w", [n, k], "f32", uniform(k * n, 4));
  return b.op("Gemm", [x, w, b.param("c", [n], "f32", uniform(n, 5))], { transB: 1 });
};

/** The graph's product kernel. */
function productOf(graph: Graph) {
  return fuse(graph).kernels.find((k) => k.pattern === "matmul" || k.space.length > 3)!;
}

Deno.test("a matmul of one B with A's rows along K takes the dot tiles; convolutions and others do not", () => {
  assert.ok(takesDots(productOf(graphOf(128, 768, linear(768, 3072)))), "BERT's MLP");
  assert.ok(takesDots(productOf(graphOf(7, 36, gemm(36, 19)))), "Gemm, B transposed");
  assert.ok(!takesDots(productOf(graphOf(8, 30, linear(30, 16)))), "K not a multiple of 4");
  assert.ok(!takesDots(productOf(graphOf(8, 12, linear(12, 16)))), "K below 16");
  const batched = new GraphBuilder();
  batched.output(
    "y",
    batched.op("MatMul", [
      batched.input("x", [2, 8, 64]),
      batched.param("w", [2, 64, 32], "f32", uniform(2 * 64 * 32, 6)),
    ]),
  );
  assert.ok(!takesDots(productOf(batched.build())), "a B a batch");
  const conv = new GraphBuilder();
  conv.output(
    "y",
    conv.op("Conv", [
      conv.input("x", [1, 64, 8, 8]),
      conv.param("w", [32, 64, 1, 1], "f32", uniform(32 * 64, 7)),
    ]),
  );
  assert.ok(!takesDots(productOf(conv.build())), "a 1×1 convolution");
});

Deno.test("dot tiles give the reference's values for every row remainder, narrow panels and both B layouts", async () => {
  const one = new WasmBackend({ threads: 1, warmUpMs: 0 });
  try {
    // Rows: tiles of 6, then two of 4 (8 left), 4, 2 and 1 left; K = 36: nine four-k steps.
    for (const rows of [1, 2, 3, 5, 6, 7, 13, 14, 20]) {
      for (const [k, n] of [[36, 19], [64, 8], [16, 3]]) {
        for (const build of [linear(k, n), gemm(k, n)]) {
          const graph = graphOf(rows, k, build);
          assert.ok(takesDots(productOf(graph)), `${rows}×${k}×${n}`);
          const x = f32(uniform(rows * k, rows), [rows, k]);
          using exe = await compile(graph, { backend: one, cache: false });
          using reference = await compile(graph, { backend: "reference" });
          const [got, want] = [await exe.run({ x }), await reference.run({ x })];
          assertClose(numbers(got.y.data), numbers(want.y.data), {
            atol: 1e-5,
            rtol: 1e-4,
            message: `${rows}×${k}×${n}`,
          });
        }
      }
    }
  } finally {
    one.dispose();
  }
});
