import assert from "node:assert/strict";
import {
  GraphBuilder,
  KilnError,
  OnnxModel,
  registerOnnxOp,
  registerOp,
  toOnnx,
} from "../../mod.ts";
import { encodeModel, type ModelProto } from "../wire/proto.ts";

// y = x * scale + shift, with a ramp of 4; a kiln op of the test's own (reference only).
registerOp({
  name: "test.ScaleShift",
  inferShape: ([x]) => x,
  reference: ([x], attrs) =>
    (x.data as Float32Array).map((v) => v * (attrs.scale as number) + (attrs.shift as number)),
});

type Node = ModelProto["graph"]["node"][number];

function model(node: Node, opsets: ModelProto["opsetImport"]): Uint8Array {
  const dims = { dim: [{ dimValue: 4 }] };
  return encodeModel({
    irVersion: 8,
    opsetImport: opsets,
    graph: {
      name: "g",
      node: [node],
      initializer: [],
      input: [{ name: "x", type: { tensorType: { elemType: 1, shape: dims } } }],
      output: [{ name: "y", type: { tensorType: { elemType: 1, shape: dims } } }],
    },
  });
}

const x = { data: Float32Array.from([0, 1, 2, 3]), shape: [4], dtype: "f32" as const };
const node = (domain: string, opType: string): Node => ({
  opType,
  domain,
  input: ["x"],
  output: ["y"],
  attribute: [{ name: "scale", type: 1, f: 2 }, { name: "shift", type: 1, f: 0.5 }],
});

Deno.test("a custom-domain op imports once its kiln op and its ONNX name are registered", async () => {
  const bytes = model(node("com.example", "ScaleShift"), [
    { domain: "", version: 17 },
    { domain: "com.example", version: 3 },
  ]);
  assert.throws(
    () => OnnxModel.fromBytes(bytes).graph(),
    (e) => e instanceof KilnError && e.code === "unknown-op" && /registerOnnxOp/.test(e.message),
  );
  registerOnnxOp({
    domain: "com.example",
    opType: "ScaleShift",
    op: "test.ScaleShift",
    opsets: [2, 4],
  });
  const { y } = await OnnxModel.fromBytes(bytes).run({ x }, { backend: "reference" });
  assert.deepEqual([...y.data], [0.5, 2.5, 4.5, 6.5]);
  // Outside the registered opset range the op is unknown again.
  const v5 = model(node("com.example", "ScaleShift"), [
    { domain: "", version: 17 },
    { domain: "com.example", version: 5 },
  ]);
  assert.throws(
    () => OnnxModel.fromBytes(v5).graph(),
    (e) => e instanceof KilnError && e.code === "unknown-op",
  );
});

Deno.test("a dotted op name in the default domain, with attributes mapped", async () => {
  registerOnnxOp({
    domain: "",
    opType: "my.Affine",
    op: "test.ScaleShift",
    attributes: (a) => ({ scale: a.alpha, shift: a.beta }),
  });
  const n: Node = {
    opType: "my.Affine",
    domain: "",
    input: ["x"],
    output: ["y"],
    attribute: [{ name: "alpha", type: 1, f: -1 }, { name: "beta", type: 1, f: 1 }],
  };
  const { y } = await OnnxModel.fromBytes(model(n, [{ domain: "", version: 17 }])).run({ x }, {
    backend: "reference",
  });
  assert.deepEqual([...y.data], [1, 0, -1, -2]);
});

Deno.test("toOnnx writes registered ops in their domain, so the model reads back", async () => {
  registerOp({
    name: "test.Unmapped",
    inferShape: ([v]) => v,
    reference: ([v]) => (v.data as Float32Array).map((e) => e + 10),
  });
  const b = new GraphBuilder();
  const input = b.input("x", [4]);
  b.output("y", b.op("test.Unmapped", [b.op("test.ScaleShift", [input], { scale: 3, shift: 0 })]));
  const back = OnnxModel.fromBytes(toOnnx(b.build()));
  const { y } = await back.run({ x }, { backend: "reference" });
  assert.deepEqual([...y.data], [10, 13, 16, 19]);
});

Deno.test("registerOnnxOp refuses an unknown kiln op and a reversed opset range", () => {
  assert.throws(
    () => registerOnnxOp({ domain: "a", opType: "B", op: "no.SuchOp" }),
    (e) => e instanceof KilnError && /registerOp first/.test(e.message),
  );
  assert.throws(
    () => registerOnnxOp({ domain: "a", opType: "B", op: "test.ScaleShift", opsets: [3, 1] }),
    (e) => e instanceof KilnError && /not a range/.test(e.message),
  );
});
