import assert from "node:assert/strict";
import { KilnError } from "../jit/errors.ts";
import { assertClose, numbers } from "../jit/testing.ts";
import { OnnxModel } from "./model.ts";
import { encodeModel } from "./proto.ts";
import "../mod.ts";

const tensor = (name: string, elemType: number, dims: number[]) => ({
  name,
  type: { tensorType: { elemType, shape: { dim: dims.map((d) => ({ dimValue: d })) } } },
});

/** ScatterElements along axis 1 of data [4, 10] with updates and indices [4, 40] as inputs. */
function model(reduction: string): OnnxModel {
  return OnnxModel.fromBytes(encodeModel({
    irVersion: 9,
    opsetImport: [{ domain: "", version: 18 }],
    graph: {
      name: "g",
      node: [{
        opType: "ScatterElements",
        input: ["data", "idx", "upd"],
        output: ["y"],
        attribute: [
          { name: "axis", type: 2, i: 1 },
          { name: "reduction", type: 3, s: new TextEncoder().encode(reduction) },
        ],
      }],
      initializer: [],
      input: [tensor("data", 1, [4, 10]), tensor("idx", 7, [4, 40]), tensor("upd", 1, [4, 40])],
      output: [tensor("y", 1, [4, 10])],
    },
  }));
}

const data = Array.from({ length: 40 }, (_, i) => (i % 7) - 3);
const upd = Array.from({ length: 160 }, (_, i) => Math.sin(i) * 5);
// Duplicates everywhere, negative indices counting from the end.
const idx = Array.from({ length: 160 }, (_, i) => ((i * 7) % 20) - 10);

/** ONNX's definition, in its iteration order. */
function expected(reduction: string): number[] {
  const out = [...data];
  for (let r = 0; r < 4; r++) {
    for (let k = 0; k < 40; k++) {
      const j = idx[r * 40 + k], at = r * 10 + (j < 0 ? j + 10 : j), u = upd[r * 40 + k];
      out[at] = reduction === "add"
        ? out[at] + u
        : reduction === "max"
        ? Math.max(out[at], u)
        : reduction === "min"
        ? Math.min(out[at], u)
        : u;
    }
  }
  return out;
}

const feeds = (indices: number[]) => ({
  data: { data: Float32Array.from(data), shape: [4, 10], dtype: "f32" as const },
  idx: { data: BigInt64Array.from(indices, BigInt), shape: [4, 40], dtype: "i64" as const },
  upd: { data: Float32Array.from(upd), shape: [4, 40], dtype: "f32" as const },
});

for (const backend of ["reference", "wasm", "webgpu"]) {
  Deno.test(`${backend}: ScatterElements with run-time indices past specialising (160 of them)`, async () => {
    for (const reduction of ["none", "add", "max", "min"]) {
      const m = model(reduction);
      try {
        const out = await m.run(feeds(idx), { backend, cache: false });
        assertClose(numbers(out.y.data), expected(reduction).map(Math.fround), {
          atol: 1e-5,
          rtol: 1e-6,
          message: reduction,
        });
      } finally {
        m.dispose();
      }
    }
  });
}

for (const backend of ["reference", "wasm"]) {
  Deno.test(`${backend}: a run-time scatter index out of range is a typed error`, async () => {
    const m = model("add");
    try {
      await assert.rejects(
        m.run(feeds(idx.map((v, i) => (i === 77 ? 10 : v))), { backend, cache: false }),
        (e) => e instanceof KilnError && e.code === "out-of-range",
      );
    } finally {
      m.dispose();
    }
  });
}
