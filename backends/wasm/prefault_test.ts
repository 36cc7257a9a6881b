import assert from "node:assert/strict";
import { counterValues } from "../../jit/runtime/counters.ts";
import { denoWorkers } from "./web_workers.ts";
import { WorkerPool } from "./worker_crew.ts";
import { PAGE_BYTES, TOUCH, touchOnThreads, touchPages } from "./prefault.ts";

/** A shared memory of `pages` 64 KB pages, every word its own index. */
function numbered(pages: number): WebAssembly.Memory {
  const memory = new WebAssembly.Memory({ initial: pages, maximum: pages, shared: true });
  const words = new Int32Array(memory.buffer);
  for (let i = 0; i < words.length; i++) words[i] = i;
  return memory;
}

/** Whether every word of `memory` still holds its index. */
function intact(memory: WebAssembly.Memory): boolean {
  const words = new Int32Array(memory.buffer);
  return words.every((w, i) => w === i);
}

Deno.test("touching pages changes no byte, at the range's edges too", () => {
  const memory = numbered(4);
  touchPages(memory, 3, 0, 60);
  touchPages(memory, 0, 0, 1);
  assert.ok(intact(memory));
  // Past the memory's end is a caller's error, not a silent write elsewhere.
  assert.throws(() => touchPages(memory, 0, 64, 65), RangeError);
});

Deno.test("a crew's threads touch a range's pages as one job, changing no byte", async () => {
  const pool = WorkerPool.of({ threads: 2, ...denoWorkers()! });
  const memory = numbered(256);
  const crew = pool.enlist({
    modules: [],
    memory,
    args: new Int32Array(new SharedArrayBuffer(4)),
    argAt: [0],
    packs: [],
    scratch: 0,
    scratchBytes: 0,
  });
  try {
    pool.start();
    for (let t = 0; pool.ready() < 1; t++) {
      assert.ok(t < 500, "the worker did not start within 10 s");
      await new Promise((r) => setTimeout(r, 20));
    }
    touchOnThreads(crew, memory, 5 * PAGE_BYTES + 100, 3000 * PAGE_BYTES);
    assert.ok(intact(memory));
    // A caller slow over its pieces leaves some to the worker, whose touches change nothing.
    const before = counterValues().kiln_worker_pieces_total;
    crew.prime();
    crew.run(TOUCH, 4096, { unit: 1, chunk: 0, pieces: 4 }, (a, b) => {
      for (const t = performance.now(); performance.now() - t < 20;);
      touchPages(memory, 0, a, b);
    });
    crew.rest();
    assert.ok(counterValues().kiln_worker_pieces_total > before, "the worker took no piece");
    assert.ok(intact(memory));
  } finally {
    crew.dispose();
  }
});
