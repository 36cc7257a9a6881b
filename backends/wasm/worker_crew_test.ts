import assert from "node:assert/strict";
import { Worker } from "node:worker_threads";
import { Crew, partOf, type WorkerClass } from "./worker_crew.ts";

/** run(out, scratch, start, end): out[i] = scratch for i in [start, end) — who computed what. */
async function markerModule(): Promise<WebAssembly.Module> {
  const binaryen = (await import("npm:binaryen@132.0.0")).default;
  const m = new binaryen.Module();
  m.setFeatures(binaryen.Features.Atomics);
  m.setMemory(1, 1, null, [], true, false, "0");
  m.addMemoryImport("0", "env", "memory");
  const i32 = binaryen.i32, get = (l: number) => m.local.get(l, i32);
  m.addFunction(
    "run",
    binaryen.createType([i32, i32, i32, i32]),
    binaryen.none,
    [],
    m.block(null, [
      m.if(
        m.i32.lt_s(get(2), get(3)),
        m.loop(
          "l",
          m.block(null, [
            m.i32.store(0, 4, m.i32.add(get(0), m.i32.shl(get(2), m.i32.const(2))), get(1)),
            m.local.set(2, m.i32.add(get(2), m.i32.const(1))),
            m.br("l", m.i32.lt_s(get(2), get(3))),
          ]),
        ),
      ),
    ]),
  );
  m.addFunctionExport("run", "run");
  assert.ok(m.validate());
  const module = new WebAssembly.Module(m.emitBinary() as Uint8Array<ArrayBuffer>);
  m.dispose();
  return module;
}

Deno.test("partOf splits rows in multiples of the unit and covers them once", () => {
  assert.deepEqual([0, 1, 2].map((p) => partOf(100, 3, 16, p)), [[0, 48], [48, 96], [96, 100]]);
  assert.deepEqual([0, 1].map((p) => partOf(10, 2, 16, p)), [[0, 10], [10, 10]]);
});

Deno.test("a crew splits a kernel's rows between the caller and its workers", async () => {
  const memory = new WebAssembly.Memory({ initial: 1, maximum: 1, shared: true });
  const module = await markerModule();
  const caller = new WebAssembly.Instance(module, { env: { memory } }).exports.run as (
    ...a: number[]
  ) => void;
  const crew = new Crew({
    threads: 3,
    Worker: Worker as unknown as WorkerClass,
    modules: [module],
    memory,
    args: [[0]],
    scratch: 1000,
    scratchBytes: 1,
  });
  try {
    // Until the workers are up, the caller computes everything itself.
    for (let t = 0; crew.ready() < 2; t++) {
      assert.ok(t < 500, "workers did not start within 10 s");
      await new Promise((r) => setTimeout(r, 20));
    }
    crew.run(0, 4000, { unit: 16, chunk: 100 }, (start, end) => caller(0, 1000, start, end));
    const marks = new Int32Array(memory.buffer, 0, 4000);
    // Parts of 1344 rows (a multiple of 16): caller's scratch 1000, workers' 1001 and 1002.
    assert.deepEqual([marks[0], marks[1343], marks[1344], marks[2687], marks[2688], marks[3999]], [
      1000,
      1000,
      1001,
      1001,
      1002,
      1002,
    ]);
  } finally {
    crew.dispose();
  }
  assert.equal(crew.ready(), 0);
});
