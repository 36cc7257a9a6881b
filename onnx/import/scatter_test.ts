import assert from "node:assert/strict";
import { KilnError } from "../../jit/support/errors.ts";
import { assertClose, numbers } from "../../jit/testing/testing.ts";
import { OnnxModel } from "../model.ts";
import { encodeModel } from "../wire/proto.ts";
import "../../mod.ts";

const tensor = (name: string, elemType: number, dims: number[]) => ({
  name,
  type: { tensorType: { elemType, shape: { dim: dims.map((d) => ({ dimValue: d })) } } },
});

/** One scatter node `op` over inputs data, idx (int64) and upd of the given shapes. */
function scatterModel(
  op: string,
  reduction: string,
  [data, idx, upd]: number[][],
  axis?: number,
): OnnxModel {
  const text = (name: string, v: string) => ({
    name,
    type: 3,
    s: new TextEncoder().encode(v),
  });
  return OnnxModel.fromBytes(encodeModel({
    irVersion: 9,
    opsetImport: [{ domain: "", version: 18 }],
    graph: {
      name: "g",
      node: [{
        opType: op,
        input: ["data", "idx", "upd"],
        output: ["y"],
        attribute: [
          ...(axis === undefined ? [] : [{ name: "axis", type: 2, i: axis }]),
          text("reduction", reduction),
        ],
      }],
      initializer: [],
      input: [tensor("data", 1, data), tensor("idx", 7, idx), tensor("upd", 1, upd)],
      output: [tensor("y", 1, data)],
    },
  }));
}

/** ScatterElements along axis 1 of data [4, 10] with updates and indices [4, 40] as inputs. */
const model = (reduction: string) =>
  scatterModel("ScatterElements", reduction, [[4, 10], [4, 40], [4, 40]], 1);

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

/** ScatterND of updates [T, 4] into data [8, 4] at run-time row indices [T, 1]. */
const ndModel = (reduction: string, tuples: number) =>
  scatterModel("ScatterND", reduction, [[8, 4], [tuples, 1], [tuples, 4]]);

for (const backend of ["reference", "wasm", "webgpu"]) {
  Deno.test(`${backend}: ScatterND with run-time indices (a cache's write rows), duplicates and negatives`, async () => {
    const rows = [
      3,
      -1,
      3,
      0,
      5,
      -8,
      3,
      6,
      2,
      1,
      0,
      4,
      5,
      7,
      2,
      3,
      6,
      1,
      0,
      2,
      4,
      5,
      6,
      7,
      1,
      2,
      3,
      0,
      4,
      5,
      6,
      7,
      1,
      2,
      3,
      4,
      5,
      6,
      7,
      0,
    ];
    // 70 tuples: past the 64 elements OnnxModel would specialise on.
    rows.push(...rows.slice(0, 30));
    const base = Array.from({ length: 32 }, (_, i) => i / 4);
    const upd = Array.from({ length: rows.length * 4 }, (_, i) => Math.cos(i) * 3);
    for (const reduction of ["none", "add"]) {
      const want = [...base];
      rows.forEach((r, t) => {
        const at = (r < 0 ? r + 8 : r) * 4;
        for (let e = 0; e < 4; e++) {
          want[at + e] = reduction === "add" ? want[at + e] + upd[t * 4 + e] : upd[t * 4 + e];
        }
      });
      const m = ndModel(reduction, rows.length);
      try {
        const out = await m.run({
          data: { data: Float32Array.from(base), shape: [8, 4], dtype: "f32" },
          idx: { data: BigInt64Array.from(rows, BigInt), shape: [rows.length, 1], dtype: "i64" },
          upd: { data: Float32Array.from(upd), shape: [rows.length, 4], dtype: "f32" },
        }, { backend, cache: false });
        assertClose(numbers(out.y.data), want.map(Math.fround), {
          atol: 1e-5,
          rtol: 1e-5,
          message: reduction,
        });
      } finally {
        m.dispose();
      }
    }
  });
}

Deno.test("a scatter's initializer indices are a constant of the graph, which its decomposition reads", () => {
  // Read as a named param, the indices were a run-time value: every update matched against every
  // position, where known indices make one gather a layer.
  const model = OnnxModel.fromBytes(encodeModel({
    irVersion: 9,
    opsetImport: [{ domain: "", version: 18 }],
    graph: {
      name: "g",
      node: [{ opType: "ScatterND", input: ["data", "idx", "upd"], output: ["y"], attribute: [] }],
      initializer: [{ name: "idx", dims: [2, 1], dataType: 7, int64Data: [2, 0] }],
      input: [tensor("data", 1, [4, 3]), tensor("upd", 1, [2, 3])],
      output: [{ name: "y", type: { tensorType: { elemType: 1 } } }],
    },
  }));
  const graph = model.graph();
  const scatter = graph.nodes.find((n) => n.op === "ScatterND")!;
  const producer = graph.values[scatter.inputs[1]].producer;
  assert.equal(graph.nodes[producer]?.op, "Constant");
});
