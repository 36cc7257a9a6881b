import assert from "node:assert/strict";
import { KilnError } from "../../jit/support/errors.ts";
import { OnnxModel } from "../model.ts";
import { encodeModel, type ModelProto, type NodeProto } from "../wire/proto.ts";
import { formatFloat, runStringNode, type StringTensor } from "./string_ops.ts";
import "../../mod.ts";

const bytes = (s: string) => new TextEncoder().encode(s);
const strings = (data: string[], shape = [data.length]): StringTensor => ({
  dtype: "string",
  shape,
  data,
});
const node = (
  opType: string,
  input: string[],
  output: string[],
  attribute: NodeProto["attribute"] = [],
): NodeProto => ({ opType, input, output, attribute });
const value = (name: string, elemType: number) => ({ name, type: { tensorType: { elemType } } });

function model(
  nodes: NodeProto[],
  inputs: [string, number][],
  outputs: [string, number][],
  initializer: ModelProto["graph"]["initializer"] = [],
): OnnxModel {
  return OnnxModel.fromBytes(encodeModel({
    irVersion: 8,
    opsetImport: [{ domain: "", version: 20 }],
    graph: {
      name: "strings",
      node: nodes,
      initializer,
      input: inputs.map(([n, t]) => value(n, t)),
      output: outputs.map(([n, t]) => value(n, t)),
    },
  }));
}

/**
 * Words → drop stop words, upper-case → compare with "RED" (a bool before the numeric part);
 * numbers as strings → parsed → × 2 + the bool on the backend → written back as strings.
 */
const pipeline = () =>
  model(
    [
      node("StringNormalizer", ["words"], ["clean"], [
        { name: "case_change_action", type: 3, s: bytes("UPPER") },
        { name: "stopwords", type: 8, strings: [bytes("the")] },
      ]),
      node("Equal", ["clean", "red"], ["is_red"]),
      node("Cast", ["is_red"], ["red_f"], [{ name: "to", type: 2, i: 1 }]),
      node("Cast", ["numbers"], ["x"], [{ name: "to", type: 2, i: 1 }]),
      node("Mul", ["x", "two"], ["x2"]),
      node("Add", ["x2", "red_f"], ["y"]),
      node("Cast", ["y"], ["text"], [{ name: "to", type: 2, i: 8 }]),
    ],
    [["words", 8], ["numbers", 8]],
    [["clean", 8], ["y", 1], ["text", 8]],
    [
      { name: "red", dims: [1], dataType: 8, stringData: [bytes("RED")] },
      { name: "two", dims: [], dataType: 1, floatData: [2] },
    ],
  );

for (const backend of ["reference", "wasm", "webgpu"]) {
  Deno.test(`${backend}: string ops run on the host around the compiled numeric part`, async () => {
    const m = pipeline();
    try {
      for (let run = 0; run < 2; run++) {
        const out = await m.runValues({
          words: strings(["the", "Red", "green", "THE", "red"]),
          numbers: strings(["1.5", "-INF", "1e-3"]),
        }, { backend, cache: false });
        assert.deepEqual((out.clean as StringTensor).data, ["RED", "GREEN", "RED"]);
        assert.deepEqual((out.clean as StringTensor).shape, [3]);
        assert.deepEqual(
          Array.from((out.y as { data: Float32Array }).data),
          [4, -Infinity, 1.002]
            .map(Math.fround),
        );
        assert.deepEqual((out.text as StringTensor).data, ["4.0", "-INF", "1.002"]);
      }
    } finally {
      m.dispose();
    }
  });
}

Deno.test("floats are written as the shortest decimal that reads back, as ONNX's reference writes them", () => {
  assert.equal(formatFloat(Math.fround(0.6048455)), "0.6048455");
  assert.equal(formatFloat(Math.fround(0.039187793)), "0.039187793");
  assert.equal(formatFloat(1), "1.0");
  assert.equal(formatFloat(-0), "-0.0");
  assert.equal(formatFloat(Math.fround(1e-5)), "1e-05");
  assert.equal(formatFloat(Math.fround(2.5e20)), "2.5e+20");
  assert.equal(formatFloat(NaN), "NaN");
  assert.equal(formatFloat(-Infinity), "-INF");
  // Every f32 the format writes reads back as itself.
  const f = new Float32Array(1), u = new Uint32Array(f.buffer);
  for (let i = 0; i < 2000; i++) {
    u[0] = (Math.imul(i, 2654435761) >>> 1) & 0x7f7fffff;
    assert.equal(Math.fround(Number(formatFloat(f[0]))), f[0]);
  }
});

Deno.test("Cast between strings and double keeps f64's digits both ways", () => {
  const [d] = runStringNode(node("Cast", ["s"], ["d"], [{ name: "to", type: 2, i: 11 }]), [
    strings(["0.1", "-2.5e-300", "INF", "123456789.123456789"]),
  ]);
  assert.equal(d.dtype, "f64");
  assert.deepEqual(Array.from(d.data as Float64Array), [
    0.1,
    -2.5e-300,
    Infinity,
    123456789.12345679,
  ]);
  const [s] = runStringNode(node("Cast", ["d"], ["s"], [{ name: "to", type: 2, i: 8 }]), [
    { data: new Float64Array([0.1, 1 / 3, 1e-5]), shape: [3], dtype: "f64" },
  ]);
  assert.deepEqual((s as StringTensor).data, ["0.1", "0.3333333333333333", "1e-05"]);
});

Deno.test("StringSplit, StringConcat and RegexFullMatch follow ONNX's definitions", () => {
  const x = strings(["a,b,,c", "d", ""]);
  const [y, n] = runStringNode(
    node("StringSplit", ["x"], ["y", "n"], [
      { name: "delimiter", type: 3, s: bytes(",") },
    ]),
    [x],
  );
  assert.deepEqual(y, strings(["a", "b", "", "c", "d", "", "", "", "", "", "", ""], [3, 4]));
  assert.deepEqual(Array.from(n.data as BigInt64Array, Number), [4, 1, 1]);
  const [w] = runStringNode(
    node("StringSplit", ["x"], ["y", "n"], [
      { name: "maxsplit", type: 2, i: 1 },
    ]),
    [strings([" one  two three "])],
  );
  assert.deepEqual(w.data, ["one", "two three"]);
  const [c] = runStringNode(node("StringConcat", ["a", "b"], ["c"]), [
    strings(["x", "y"], [2, 1]),
    strings(["1", "2", "3"], [3]),
  ]);
  assert.deepEqual(c, strings(["x1", "x2", "x3", "y1", "y2", "y3"], [2, 3]));
  const [r] = runStringNode(
    node("RegexFullMatch", ["x"], ["r"], [
      { name: "pattern", type: 3, s: bytes("[a-z]+@[a-z]+\\.com") },
    ]),
    [strings(["me@mail.com", "me@mail.com.au", "@x.com"])],
  );
  assert.deepEqual(Array.from(r.data as Uint8Array), [1, 0, 0]);
});

Deno.test("what kiln cannot do with strings is a typed error", async () => {
  // A string op between two numeric ops would split the compiled part.
  assert.throws(
    () =>
      model(
        [
          node("Relu", ["x"], ["r"]),
          node("Cast", ["r"], ["s"], [{ name: "to", type: 2, i: 8 }]),
          node("Cast", ["s"], ["f"], [{ name: "to", type: 2, i: 1 }]),
          node("Relu", ["f"], ["y"]),
        ],
        [["x", 1]],
        [["y", 1]],
      ),
    (e) => e instanceof KilnError && /only before or after/.test(e.message),
  );
  const parse = model([node("Cast", ["s"], ["y"], [{ name: "to", type: 2, i: 1 }])], [["s", 8]], [[
    "y",
    1,
  ]]);
  await assert.rejects(
    parse.runValues({ s: strings(["1", "hello"]) }),
    (e) => e instanceof KilnError && /"hello" is not a number/.test(e.message),
  );
  await assert.rejects(
    parse.runValues({ s: { dtype: "string", shape: [3], data: ["1"] } }),
    (e) => e instanceof KilnError && /needs 3 strings/.test(e.message),
  );
  const transpose = model([node("Transpose", ["s"], ["y"])], [["s", 8]], [["y", 8]]);
  await assert.rejects(
    transpose.runValues({ s: strings(["a", "b"]) }),
    (e) => e instanceof KilnError && /numbers only/.test(e.message),
  );
  // Numeric outputs only through run(); strings come back from runValues.
  await assert.rejects(
    model([node("Identity", ["s"], ["y"])], [["s", 8]], [["y", 8]]).run({}),
    (e) => e instanceof KilnError,
  );
});
