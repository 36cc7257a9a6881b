import assert from "node:assert/strict";
import { compile } from "../mod.ts";
import { GraphBuilder } from "../jit/frontend/graph_builder.ts";

/**
 * i16 and u16 wrap at 16 bits after every op on every backend (ONNX's int16/uint16, numpy's
 * arithmetic), so a comparison after an overflow sees the wrapped value; casts into them saturate,
 * as casts into every integer type do.
 */
for (const backend of ["reference", "wasm", "webgpu"]) {
  Deno.test(`${backend}: i16 and u16 wrap after every op; casts into them saturate`, async () => {
    const b = new GraphBuilder();
    const a = b.input("a", [4], "i16"), u = b.input("u", [4], "u16"), f = b.input("f", [4]);
    const sum = b.op("Add", [a, a]);
    b.output("sum", sum);
    b.output("prod", b.op("Mul", [u, u]));
    b.output("neg", b.op("Neg", [a]));
    b.output("wrapped", b.op("Greater", [sum, a]));
    b.output("toI16", b.op("Cast", [f], { to: "i16" }));
    b.output("toU16", b.op("Cast", [f], { to: "u16" }));
    using exe = await compile(b.build(), { backend, cache: false });
    const out = await exe.run({
      a: { data: Int16Array.from([30000, -30000, 5, -32768]), shape: [4], dtype: "i16" },
      u: { data: Uint16Array.from([300, 65535, 2, 256]), shape: [4], dtype: "u16" },
      f: { data: Float32Array.from([1e6, -1e6, 12.9, -3.5]), shape: [4], dtype: "f32" },
    });
    const of = (name: string) => Array.from(out[name].data as Int16Array, Number);
    assert.ok(out.sum.data instanceof Int16Array && out.prod.data instanceof Uint16Array);
    assert.deepEqual(of("sum"), [-5536, 5536, 10, 0]);
    assert.deepEqual(of("prod"), [(300 * 300) % 65536, 1, 4, 0]);
    assert.deepEqual(of("neg"), [-30000, 30000, -5, -32768]);
    assert.deepEqual(of("wrapped"), [0, 1, 1, 1]);
    assert.deepEqual(of("toI16"), [32767, -32768, 12, -3]);
    assert.deepEqual(of("toU16"), [65535, 0, 12, 0]);
  });
}
