/**
 * The attributes opsets 18–21 added that PyTorch's dynamo exporter (its default) writes: Split's
 * num_outputs, the reductions' noop_with_empty_axes, Cast's saturate. Each is read, not refused.
 */
import assert from "node:assert/strict";
import { KilnError } from "../../jit/support/errors.ts";
import type { HostTensor } from "../../jit/ir/host_tensor.ts";
import { numbers } from "../../jit/testing/testing.ts";
import { OnnxModel } from "../model.ts";
import { type AttributeProto, encodeModel, type NodeProto } from "../wire/proto.ts";
import "../../mod.ts";

const tensor = (name: string, dims: number[], elemType = 1) => ({
  name,
  type: { tensorType: { elemType, shape: { dim: dims.map((d) => ({ dimValue: d })) } } },
});
const int = (name: string, i: number): AttributeProto => ({ name, type: 2, i });

function model(node: NodeProto, outputs: [string, number[]][]): OnnxModel {
  return OnnxModel.fromBytes(encodeModel({
    irVersion: 9,
    opsetImport: [{ domain: "", version: 20 }],
    graph: {
      name: "g",
      node: [node],
      initializer: [{ name: "axes", dims: [1], dataType: 7, int64Data: [1] }],
      input: [tensor("x", [2, 7])],
      output: outputs.map(([n, d]) => tensor(n, d)),
    },
  }));
}

const x = {
  data: Float32Array.from({ length: 14 }, (_, i) => i),
  shape: [2, 7],
  dtype: "f32",
} as const;
const values = (t: HostTensor) => numbers(t.data);

for (const backend of ["reference", "wasm", "webgpu"]) {
  Deno.test(`${backend}: Split's num_outputs splits as opset 18 says, the last part smaller`, async () => {
    const m = model(
      {
        opType: "Split",
        input: ["x"],
        output: ["a", "b", "c"],
        attribute: [int("axis", 1), int("num_outputs", 3)],
      },
      [["a", [2, 3]], ["b", [2, 3]], ["c", [2, 1]]],
    );
    const out = await m.run({ x }, { backend, cache: false });
    assert.deepEqual(values(out.a), [0, 1, 2, 7, 8, 9]);
    assert.deepEqual(values(out.b), [3, 4, 5, 10, 11, 12]);
    assert.deepEqual(values(out.c), [6, 13]);
    m.dispose();
  });
}

Deno.test("ReduceMean reads noop_with_empty_axes: given axes reduce, empty ones pass x through", async () => {
  const mean = (noop: number, axes: string[]) =>
    model({
      opType: "ReduceMean",
      input: ["x", ...axes],
      output: ["y"],
      attribute: [int("keepdims", 0), int("noop_with_empty_axes", noop)],
    }, [["y", noop && !axes.length ? [2, 7] : axes.length ? [2] : []]]);
  assert.deepEqual(values((await mean(0, ["axes"]).run({ x })).y), [3, 10]);
  assert.deepEqual(values((await mean(1, ["axes"]).run({ x })).y), [3, 10]);
  assert.deepEqual(values((await mean(1, []).run({ x })).y), values(x));
  assert.deepEqual(values((await mean(0, []).run({ x })).y), [6.5]);
});

Deno.test("Cast reads saturate (float8 only); a num_outputs that disagrees is a typed error", async () => {
  const cast = model({
    opType: "Cast",
    input: ["x"],
    output: ["y"],
    attribute: [int("to", 1), int("saturate", 1)],
  }, [["y", [2, 7]]]);
  assert.deepEqual(values((await cast.run({ x })).y), values(x));
  const bad = model(
    {
      opType: "Split",
      input: ["x"],
      output: ["a", "b"],
      attribute: [int("axis", 1), int("num_outputs", 3)],
    },
    [["a", [2, 4]], ["b", [2, 3]]],
  );
  await assert.rejects(
    bad.run({ x }),
    (e) => e instanceof KilnError && /num_outputs is 3 but the node has 2 outputs/.test(e.message),
  );
});
