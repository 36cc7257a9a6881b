import assert from "node:assert/strict";
import type { HostTensor } from "../../jit/ir/host_tensor.ts";
import { narrowToBf16, widenBf16 } from "../../jit/ir/dtype.ts";
import { OnnxModel } from "../model.ts";
import { encodeModel } from "../wire/proto.ts";
import "../../mod.ts";

/** The f32 bit patterns checked: ties both ways, NaN, infinities, overflow, subnormals, zeros. */
const BITS = [
  0x3f808000, // 1.00390625: a tie, kept bit even → down
  0x3f818000, // a tie, kept bit odd → up
  0x3f808001, // just past a tie → up
  0x3f807fff, // just below a tie → down
  0x7f7fffff, // largest f32 → infinity
  0xff7f8000, // a tie at the top, odd → −infinity
  0x7f800000, // infinity
  0xff800000, // −infinity
  0x00008000, // a subnormal tie, even → 0
  0x00018000, // a subnormal tie, odd → up
  0x80000000, // −0
  0x3eaaaaab, // 1/3
];

/** Round to nearest even on the bits, written independently of the importer's graph. */
function expected(bits: number): number {
  const f = new Float32Array(1), u = new Uint32Array(f.buffer);
  u[0] = bits;
  if (Number.isNaN(f[0])) return NaN;
  const low = bits & 0xffff, high = bits >>> 16;
  const up = low > 0x8000 || (low === 0x8000 && (high & 1) === 1);
  u[0] = ((high + (up ? 1 : 0)) << 16) >>> 0;
  return f[0];
}

const values = () => {
  const u = Uint32Array.from([...BITS, 0x7fc00001]);
  return Array.from(new Float32Array(u.buffer));
};

const tensorType = (elemType: number, n: number) => ({
  tensorType: { elemType, shape: { dim: [{ dimValue: n }] } },
});

/**
 * x (f32) → Cast to bfloat16 → `y` (bfloat16 output); x + w (w a bfloat16 initializer whose
 * values are exact) → `z`, declared bfloat16, so rounded at the output; Cast back to f32 → `back`.
 */
function model(n: number): OnnxModel {
  const w = new Uint16Array(n).fill(0x3f80); // 1.0 in bfloat16
  return OnnxModel.fromBytes(encodeModel({
    irVersion: 8,
    opsetImport: [{ domain: "", version: 17 }],
    graph: {
      name: "bf16",
      node: [
        {
          opType: "Cast",
          input: ["x"],
          output: ["y"],
          attribute: [{ name: "to", type: 2, i: 16 }],
        },
        { opType: "Add", input: ["y", "w"], output: ["z"], attribute: [] },
        {
          opType: "Cast",
          input: ["z"],
          output: ["back"],
          attribute: [{ name: "to", type: 2, i: 1 }],
        },
      ],
      initializer: [{ name: "w", dims: [n], dataType: 16, rawData: new Uint8Array(w.buffer) }],
      input: [{ name: "x", type: tensorType(1, n) }],
      output: [
        { name: "y", type: tensorType(16, n) },
        { name: "z", type: tensorType(16, n) },
        { name: "back", type: tensorType(1, n) },
      ],
    },
  }));
}

/** `got`'s values (bfloat16 outputs come back as their bits) against `want`. */
const same = (got: HostTensor, want: readonly number[], what: string) => {
  const values = got.dtype === "bf16" ? widenBf16(got.data as Uint16Array) : got.data;
  assert.deepEqual(Array.from(values as Float32Array), want.map(Math.fround), what);
};

for (const backend of ["reference", "wasm", "webgpu"]) {
  Deno.test(`${backend}: Cast to bfloat16 rounds to nearest even on the bits; bf16 outputs are rounded`, async () => {
    const xs = values(), m = model(xs.length);
    try {
      const out = await m.run({
        x: { data: Float32Array.from(xs), shape: [xs.length], dtype: "f32" },
      }, {
        backend,
        cache: false,
      });
      const y = [...BITS.map(expected), NaN];
      assert.equal(out.y.dtype, "bf16");
      same(out.y, y, "Cast");
      // y + 1 in f32, then rounded again by the bfloat16 output; the f32 Cast of z keeps f32 sums.
      const sums = y.map((v) => Math.fround(v + 1));
      const asBits = (v: number) => new Uint32Array(Float32Array.of(v).buffer)[0];
      same(out.z, sums.map((v) => (Number.isNaN(v) ? NaN : expected(asBits(v)))), "output");
      same(out.back, sums, "f32 arithmetic on bfloat16 values");
    } finally {
      m.dispose();
    }
  });
}

Deno.test("a bfloat16 initializer reads as the f32 of its bits", async () => {
  const m = model(2);
  try {
    const out = await m.run({ x: { data: Float32Array.of(0, -2), shape: [2], dtype: "f32" } }, {
      backend: "reference",
    });
    same(out.back, [1, -1], "1.0 + x");
  } finally {
    m.dispose();
  }
});

Deno.test("a bfloat16 input takes bfloat16 bits, or f32 values rounded to bfloat16", async () => {
  const m = OnnxModel.fromBytes(encodeModel({
    irVersion: 8,
    opsetImport: [{ domain: "", version: 17 }],
    graph: {
      name: "bf16_io",
      node: [{ opType: "Add", input: ["x", "x"], output: ["y"], attribute: [] }],
      initializer: [],
      input: [{ name: "x", type: tensorType(16, 3) }],
      output: [{ name: "y", type: tensorType(16, 3) }],
    },
  }));
  try {
    assert.equal(m.inputs[0].dtype, "bf16");
    for (const backend of ["reference", "wasm", "webgpu"]) {
      const bits = narrowToBf16([1.5, -0.25, 3.3]);
      const fromBits = await m.run({ x: { data: bits, shape: [3], dtype: "bf16" } }, { backend });
      assert.equal(fromBits.y.dtype, "bf16", backend);
      same(fromBits.y, [3, -0.5, 6.59375], `${backend}: bits`);
      const x = { data: Float32Array.of(1.5, -0.25, 3.3), shape: [3], dtype: "f32" as const };
      same((await m.run({ x }, { backend })).y, [3, -0.5, 6.59375], `${backend}: f32 values`);
    }
  } finally {
    m.dispose();
  }
});
