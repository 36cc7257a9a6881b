import assert from "node:assert/strict";
import "../../mod.ts";
import { assertClose, numbers } from "../../jit/testing/testing.ts";
import { testModel, valueInfo } from "../testdata.ts";
import { encodeModel, type ModelProto, type NodeProto, type TensorProto } from "../wire/proto.ts";
import { OnnxModel } from "../model.ts";
import { mergeSiblingProducts } from "./siblings.ts";
import { uniform } from "../../jit/support/random.ts";

const [k, bits, block] = [64, 4, 32];
const blocks = k / block, blob = (block * bits) / 8;

/** A MatMulNBits of `input` with N = `n` and its B, scales and packed zero points. */
function product(name: string, input: string, n: number, seed: number) {
  const bytes = (count: number, s: number) =>
    Uint8Array.from(uniform(count, s, 0, 256), Math.floor);
  const scales = Float32Array.from(uniform(n * blocks, seed + 1, 0.01, 0.03));
  const initializer: TensorProto[] = [
    {
      name: `${name}.B`,
      dims: [n, blocks, blob],
      dataType: 2,
      rawData: bytes(n * blocks * blob, seed),
    },
    { name: `${name}.s`, dims: [n * blocks], dataType: 1, rawData: new Uint8Array(scales.buffer) },
    { name: `${name}.z`, dims: [n], dataType: 2, rawData: bytes(n, seed + 2) },
  ];
  const node: NodeProto = {
    opType: "MatMulNBits",
    domain: "com.microsoft",
    name,
    input: [input, `${name}.B`, `${name}.s`, `${name}.z`],
    output: [name],
    attribute: [
      { name: "K", type: 2, i: k },
      { name: "N", type: 2, i: n },
      { name: "bits", type: 2, i: bits },
      { name: "block_size", type: 2, i: block },
    ],
  };
  return { node, initializer };
}

/** Q, K and V of one A (N 48, 16, 16) and a product of another input, each an output. */
function layer(): ModelProto {
  const parts = [
    product("q", "a", 48, 1),
    product("k", "a", 16, 5),
    product("v", "a", 16, 9),
    product("o", "b", 8, 13),
  ];
  return {
    irVersion: 8,
    opsetImport: [{ domain: "", version: 17 }, { domain: "com.microsoft", version: 1 }],
    graph: {
      name: "g",
      node: parts.map((p) => p.node),
      initializer: parts.flatMap((p) => p.initializer),
      input: [valueInfo("a", 1, [1, k]), valueInfo("b", 1, [1, k])],
      output: ["q", "k", "v", "o"].map((o) => valueInfo(o, 1)),
    },
  };
}

Deno.test("sibling MatMulNBits of one A import as one product and a Split, with the same results", async () => {
  const model = OnnxModel.fromBytes(encodeModel(layer()));
  const proto = mergeSiblingProducts(layer());
  const ops = proto.graph.node.map((n) => n.opType);
  assert.deepEqual(ops, ["MatMulNBits", "Split", "MatMulNBits"], ops.join());
  assert.equal(proto.graph.node[0].attribute!.find((x) => x.name === "N")!.i, 80);
  // Each product alone, as its own model, against the merged import.
  const feeds = {
    a: { data: uniform(k, 20, -1, 1), shape: [1, k], dtype: "f32" as const },
    b: { data: uniform(k, 21, -1, 1), shape: [1, k], dtype: "f32" as const },
  };
  for (const backend of ["reference", "wasm", "webgpu"]) {
    const got = await model.run(feeds, { backend, cache: false });
    for (
      const [name, n, seed, input] of [["q", 48, 1, "a"], ["k", 16, 5, "a"], [
        "v",
        16,
        9,
        "a",
      ]] as const
    ) {
      const p = product(name, input, n, seed);
      const alone = testModel({
        node: [p.node],
        initializer: p.initializer,
        input: [valueInfo("a", 1, [1, k])],
        output: [valueInfo(name, 1)],
      }, { microsoft: true });
      const want = await alone.run({ a: feeds.a }, { backend: "reference", cache: false });
      assertClose(numbers(got[name].data), numbers(want[name].data), {
        atol: 1e-5,
        rtol: 1e-5,
        message: `${backend} ${name}`,
      });
    }
  }
});

Deno.test("MatMulNBits of different A, or of different forms, stay apart", () => {
  const proto = layer();
  // Different block sizes: nothing to merge.
  for (const n of proto.graph.node) {
    if (n.name === "k") {
      n.attribute = n.attribute!.map((x) => x.name === "block_size" ? { ...x, i: 16 } : x);
    }
  }
  const ops = mergeSiblingProducts(proto).graph.node.map((n) => n.name);
  assert.deepEqual(ops, ["q.siblings", "q.siblings.split", "k", "o"]);
});
