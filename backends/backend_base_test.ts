import assert from "node:assert/strict";
import type { TensorData } from "../jit/ir/dtype.ts";
import { KilnError } from "../jit/support/errors.ts";
import type { Graph } from "../jit/ir/graph.ts";
import { GraphBuilder } from "../jit/frontend/graph_builder.ts";
import { legalize } from "../jit/passes/legalize.ts";
import { registerOp } from "../jit/runtime/custom_op.ts";
import { compile } from "../mod.ts";
import { assertClose, f32, numbers, runOp } from "../jit/testing/testing.ts";
import type { DeviceProfile, NodeInfo, Program } from "../jit/runtime/backend.ts";
import { BackendBase } from "./backend_base.ts";
import { ReferenceBackend } from "./reference/reference_backend.ts";
import { BackendRegistry } from "./registry.ts";
import type { RefTensor } from "../jit/ir/host_tensor.ts";

const profile: DeviceProfile = {
  name: "fake",
  f16: false,
  f64: true,
  subgroups: false,
  simd: false,
  threads: 1,
  maxWorkgroupSize: 0,
  maxStorageBufferBytes: 0,
  maxBindings: 0,
  timestampQuery: false,
};
const reference = new ReferenceBackend();

/** Implements only whole-graph compile (delegating the arithmetic to the reference). */
class GraphOnly extends BackendBase {
  readonly id = "graph-only";
  readonly version = "1";
  readonly kind = "cpu";
  protected readonly nativeOps: ReadonlySet<string> = new Set([
    "Add",
    "Mul",
    "MatMul",
    "Exp",
    "ReduceSum",
    "Reshape",
    "Transpose",
  ]);
  compiled = 0;
  capabilities(): DeviceProfile {
    return profile;
  }
  override async compile(graph: Graph): Promise<Program> {
    this.compiled++;
    return await reference.compile(graph);
  }
}

/** Implements only per-node execution (counting the nodes it runs). */
class NodesOnly extends BackendBase {
  readonly id = "nodes-only";
  readonly version = "1";
  readonly kind = "cpu";
  protected readonly nativeOps: ReadonlySet<string> = new Set([
    "Add",
    "Mul",
    "Exp",
    "Sub",
    "Div",
    "ReduceMax",
    "ReduceSum",
    "Constant",
  ]);
  executed: string[] = [];
  capabilities(): DeviceProfile {
    return profile;
  }
  protected override async executeNode(
    node: NodeInfo,
    inputs: readonly RefTensor[],
  ): Promise<TensorData[]> {
    this.executed.push(node.op);
    return (await runOp(node.op, inputs, node.attrs, { backend: reference })).map((t) => t.data);
  }
}

class Neither extends BackendBase {
  readonly id = "neither";
  readonly version = "1";
  readonly kind = "cpu";
  protected readonly nativeOps: ReadonlySet<string> = new Set(["Add"]);
  capabilities(): DeviceProfile {
    return profile;
  }
}

Deno.test("runOp runs one op on a graph-level backend through its compile()", async () => {
  const backend = new GraphOnly();
  const [y] = await runOp("Add", [f32([1, 2]), f32([10, 20])], {}, { backend });
  assertClose(numbers(y.data), [11, 22]);
  assert.equal(backend.compiled, 1);
  const [m] = await runOp("MatMul", [f32([1, 2, 3, 4], [2, 2]), f32([1, 0, 0, 1], [2, 2])], {}, {
    backend,
  });
  assertClose(numbers(m.data), [1, 2, 3, 4]);
});

Deno.test("a backend with only executeNode() gets compile() as an interpreter", async () => {
  const backend = new NodesOnly();
  const b = new GraphBuilder();
  b.output("y", b.op("Softmax", [b.input("x", [1, 3])]));
  const exe = await compile(b.build(), { backend });
  const out = await exe.run({ x: f32([1, 2, 3], [1, 3]) });
  const e = [1, 2, 3].map(Math.exp);
  assertClose(numbers(out.y.data), e.map((v) => v / (e[0] + e[1] + e[2])));
  assert.ok(
    !backend.executed.includes("Softmax"),
    "Softmax was decomposed for a backend that lacks it",
  );
  assert.ok(backend.executed.includes("ReduceMax"));
});

Deno.test("a backend that implements neither side reports it instead of recursing", async () => {
  await assert.rejects(
    () => runOp("Add", [f32([1]), f32([1])], {}, { backend: new Neither() }),
    (e: unknown) =>
      e instanceof KilnError && /neither compile\(\) nor executeNode\(\)/.test(e.message),
  );
});

Deno.test("legalize lists every unsupported node, the backend, and who can run them", () => {
  const registry = new BackendRegistry();
  const backend = new NodesOnly();
  registry.register(backend);
  const b = new GraphBuilder();
  const x = b.input("x", [2, 2]);
  b.output("y", b.op("MatMul", [b.op("Transpose", [x], {}, { name: "t" }), x], {}, { name: "mm" }));
  assert.throws(() => legalize(b.build(), backend, registry), (e: unknown) => {
    assert.ok(e instanceof KilnError && e.code === "unsupported");
    assert.match(e.message, /Backend "nodes-only" cannot run 2 node\(s\)/);
    assert.match(e.message, /"t" \(Transpose\)/);
    assert.match(e.message, /"mm" \(MatMul\)/);
    assert.match(e.message, /Fix: compile for "reference"/);
    return true;
  });
  assert.throws(
    () => registry.register(new NodesOnly()),
    (e: unknown) => e instanceof KilnError && e.code === "duplicate-name",
  );
  assert.throws(() => registry.get("gpu"), /use one of: reference, nodes-only/);
});

Deno.test("custom ops: shape rule, reference implementation, refused where no kernel exists", async () => {
  registerOp({
    name: "test.Swish",
    inferShape: ([x]) => {
      if (x.dtype !== "f32") throw new Error("f32 only");
      return x;
    },
    reference: ([x]) => (x.data as Float32Array).map((v) => v / (1 + Math.exp(-v))),
    kernels: { "graph-only": () => "/* generated */" },
  });
  const [y] = await runOp("test.Swish", [f32([0, 1, -1])]);
  assertClose(numbers(y.data), [0, 1 / (1 + Math.exp(-1)), -1 / (1 + Math.exp(1))]);
  const b = new GraphBuilder();
  b.output("y", b.op("test.Swish", [b.input("x", [3])]));
  const g = b.build();
  assert.throws(
    () => legalize(g, new NodesOnly()),
    (e: unknown) =>
      e instanceof KilnError && e.code === "unsupported" && /test\.Swish/.test(e.message),
  );
  assert.doesNotThrow(() => legalize(g, new GraphOnly()));
  const bad = new GraphBuilder();
  bad.output("y", bad.op("test.Swish", [bad.input("x", [3], "i32")]));
  assert.throws(
    () => bad.build(),
    (e: unknown) =>
      e instanceof KilnError && /inferShape rejected the node: f32 only/.test(e.message),
  );
  assert.throws(
    () =>
      registerOp({
        name: "test.Swish",
        inferShape: (x) => x[0],
        reference: () => new Float32Array(),
      }),
    (e: unknown) => e instanceof KilnError && e.code === "duplicate-name",
  );
});

Deno.test("a custom op whose reference disagrees with its shape rule is caught", async () => {
  registerOp({ name: "test.Liar", inferShape: ([x]) => x, reference: () => new Float32Array(1) });
  await assert.rejects(
    () => runOp("test.Liar", [f32([1, 2, 3])]),
    (e: unknown) => e instanceof KilnError && /inferShape said f32\[3\]/.test(e.message),
  );
});

Deno.test("withDefaults always includes the reference backend with an honest profile", () => {
  const r = BackendRegistry.withDefaults();
  const ref = r.get("reference");
  assert.equal(ref.kind, "cpu");
  assert.equal(ref.capabilities().threads, 1);
  assert.equal(ref.capabilities().f16, false);
  assert.ok(
    r.backendsFor({ op: "Conv", attrs: {}, inputs: [], outputs: [], label: "Conv" }).some((b) =>
      b.id === "reference"
    ),
  );
});
