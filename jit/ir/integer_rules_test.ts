import assert from "node:assert/strict";
import { compile } from "../../mod.ts";
import { fuse } from "../passes/fuse.ts";
import { GraphBuilder } from "../frontend/graph_builder.ts";
import { walk } from "./kernel_ir.ts";

Deno.test("a float cast to u8 or u16 and back is float arithmetic, bit for bit the casts' values", async () => {
  const edges = [NaN, Infinity, -Infinity, -0, 0, -0.5, 0.5, 0.999, 1, 1.5, -1.5, 2.5];
  for (const [to, top] of [["u8", 255], ["u16", 65535]] as const) {
    const xs = [...edges, top - 0.5, top, top + 0.4, top + 1, 1e10, -1e10];
    const b = new GraphBuilder();
    const x = b.input("x", [xs.length]);
    const back = b.op("Cast", [b.op("Cast", [x], { to })], { to: "f32" });
    b.output("y", b.op("Mul", [back, b.constant(2)]));
    const graph = b.build();
    // No integer value is left in the fused kernel: every backend's vector code lowers it.
    const [kernel] = fuse(graph).kernels;
    let integers = 0;
    walk(kernel.outputs[0].expr, (e) => void (e.dtype === to && integers++));
    assert.equal(integers, 0);
    const feeds = { x: { data: Float32Array.from(xs), shape: [xs.length], dtype: "f32" as const } };
    // The unfused graph runs each Cast as the op itself.
    using plain = await compile(graph, { fuse: false });
    const want = Array.from((await plain.run(feeds)).y.data as Float32Array);
    for (const backend of ["reference", "wasm"]) {
      using exe = await compile(graph, { backend, cache: false });
      const got = Array.from((await exe.run(feeds)).y.data as Float32Array);
      got.forEach((v, i) =>
        assert.ok(Object.is(v, want[i]), `${to} ${backend} ${xs[i]}: ${v} ≠ ${want[i]}`)
      );
    }
  }
});
