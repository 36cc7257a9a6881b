/** The sampler: greedy limits, top-k and top-p cut-offs, and draws in their proportions. */
import assert from "node:assert/strict";
import { argmax, Sampler } from "./sampling.ts";

Deno.test("sampling: greedy, top-k of one and a tiny top-p all give the argmax", () => {
  const logits = [0.5, 2, -1, 2, 1.9];
  assert.equal(argmax(logits), 1);
  assert.equal(argmax([1, NaN, 3]), 1);
  assert.equal(new Sampler().pick(logits), 1);
  assert.ok(new Sampler({ temperature: 1, topK: 1 }).greedy);
  const tiny = new Sampler({ temperature: 1, topP: 1e-6, seed: 3 });
  for (let i = 0; i < 50; i++) assert.equal(tiny.pick(logits), 1);
});

Deno.test("sampling: draws follow the softmax and never leave the kept set", () => {
  // Probabilities 1/4 and 3/4 at temperature 1.
  const s = new Sampler({ temperature: 1, seed: 11 });
  const counts = [0, 0];
  for (let i = 0; i < 8000; i++) counts[s.pick([0, Math.log(3)])]++;
  assert.ok(Math.abs(counts[1] / 8000 - 0.75) < 0.03, `${counts}`);
  // top-k 2 of four: only the two likeliest ever come.
  const k = new Sampler({ temperature: 5, topK: 2, seed: 1 });
  const seen = new Set<number>();
  for (let i = 0; i < 500; i++) seen.add(k.pick([1, 4, 3, 0]));
  assert.deepEqual([...seen].sort(), [1, 2]);
  // top-p 0.5 over [0.6, 0.3, 0.1]: the first alone reaches it.
  const p = new Sampler({ temperature: 1, topP: 0.5, seed: 2 });
  const probs = [0.6, 0.3, 0.1].map(Math.log);
  for (let i = 0; i < 200; i++) assert.equal(p.pick(probs), 0);
  // top-p 0.8: the first two.
  const p2 = new Sampler({ temperature: 1, topP: 0.8, seed: 2 });
  const seen2 = new Set<number>();
  for (let i = 0; i < 500; i++) seen2.add(p2.pick(probs));
  assert.deepEqual([...seen2].sort(), [0, 1]);
});

Deno.test("sampling: a seed repeats its draws", () => {
  const draw = (seed: number) => {
    const s = new Sampler({ temperature: 0.8, seed });
    return Array.from({ length: 30 }, () => s.pick([0.1, 0.2, 0.3, 0.2, 0.1]));
  };
  assert.deepEqual(draw(5), draw(5));
  assert.notDeepEqual(draw(5), draw(6));
});
