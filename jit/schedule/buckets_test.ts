import assert from "node:assert/strict";
import { demoMlp } from "../../cli/demo_mlp.ts";
import { compile } from "../../mod.ts";
import { KilnError } from "../support/errors.ts";
import { GraphBuilder } from "../frontend/graph_builder.ts";
import type { HostTensor } from "../ir/host_tensor.ts";
import { randomGraph } from "../testing/random_graph.ts";
import { stats } from "../runtime/telemetry.ts";
import { assertClose, numbers } from "../testing/testing.ts";

const rows = (t: HostTensor, n: number): HostTensor => ({
  ...t,
  shape: [n, ...t.shape.slice(1)],
  data: t.data.slice(0, n * (t.data.length / t.shape[0])) as HostTensor["data"],
});

Deno.test("a bucketed executable runs smaller batches without recompiling, only the active rows", async () => {
  const demo = demoMlp();
  const exe = await compile(demo.graph, { buckets: ["x"], cache: false });
  const full = await exe.run(demo.inputs);
  const compiles = stats().kiln_compiles_total;
  for (const n of [1, 3, 7, 0]) {
    const part = await exe.run({ x: rows(demo.inputs.x, n) });
    assert.deepEqual(part.y.shape, [n, 10]);
    assertClose(numbers(part.y.data), numbers(full.y.data).slice(0, n * 10));
  }
  assert.equal(stats().kiln_compiles_total, compiles);
  assert.throws(
    () => exe.run({ x: { data: new Float32Array(9 * 784), shape: [9, 784], dtype: "f32" } }),
    (e: unknown) =>
      e instanceof KilnError && /outside this executable's bucket \[0, 8\]/.test(e.message),
  );
});

Deno.test("graphs that mix batch rows are refused at compile time", async () => {
  const b = new GraphBuilder();
  b.output("y", b.op("ReduceSum", [b.input("x", [4, 3])], { axes: [0] }));
  await assert.rejects(
    () => compile(b.build(), { buckets: ["x"] }),
    (e: unknown) =>
      e instanceof KilnError && /mixes batch rows/.test(e.message) && /Fix:/.test(e.message),
  );
  const t = new GraphBuilder();
  t.output("y", t.op("Exp", [t.op("Transpose", [t.input("x", [4, 3])])]));
  await assert.rejects(
    () => compile(t.build(), { buckets: ["x"] }),
    (e: unknown) => e instanceof KilnError && /Shape buckets/.test(e.message),
  );
});

Deno.test("property: on random graphs buckets are refused or equal the padded full run's prefix", async () => {
  let accepted = 0, refused = 0, shorter = 0;
  for (let seed = 0; seed < 400; seed++) {
    const c = randomGraph(seed);
    const first = c.graph.inputs[0];
    if (!first.shape.length || first.shape[0] < 2) continue;
    let exe;
    try {
      exe = await compile(c.graph, { buckets: [first.name], cache: false });
    } catch (e) {
      if (!(e instanceof KilnError)) throw e;
      refused++;
      continue;
    }
    accepted++;
    const bound = first.shape[0];
    const n = 1 + (seed % (bound - 1));
    const x = c.inputs[first.name];
    const padded = {
      ...x,
      data: (x.data as Float32Array).map((v, i) => (i < n * (x.data.length / bound) ? v : 0)),
    };
    const full = await exe.run({ ...c.inputs, [first.name]: padded });
    const part = await exe.run({ ...c.inputs, [first.name]: rows(x, n) });
    if (Object.entries(part).some(([name, t]) => t.data.length < full[name].data.length)) shorter++;
    for (const [name, t] of Object.entries(part)) {
      const want = numbers(full[name].data).slice(0, t.data.length);
      assertClose(numbers(t.data), want, { atol: 1e-5, message: `seed ${seed} output ${name}` });
    }
  }
  assert.ok(
    accepted > 30 && refused > 30 && shorter > 10,
    `accepted ${accepted}, refused ${refused}, shorter ${shorter}`,
  );
});
