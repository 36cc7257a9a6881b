/** `kiln generate`: ids as ONNX Runtime gives them, JSON with stats, typed usage errors. */
import assert from "node:assert/strict";
import { kiln } from "./testing.ts";

const decoders = new URL("../onnx/testdata/decoders/", import.meta.url);
const recorded = JSON.parse(await Deno.readTextFile(new URL("decoders.json", decoders)));
const model = new URL("torch_tiny.onnx", decoders).pathname;
const prompt = recorded.torch_tiny.prompt.join(",");

Deno.test("kiln generate prints ONNX Runtime's greedy ids, then prefill and decode speed", async () => {
  const r = await kiln(
    "generate",
    model,
    "--prompt-ids",
    prompt,
    "--max-new",
    "8",
    "--backend",
    "wasm",
  );
  assert.equal(r.code, 0, r.stderr);
  const [ids, prefill, decode] = r.stdout.trim().split("\n");
  assert.deepEqual(ids.trim().split(" ").map(Number), recorded.torch_tiny.greedy.slice(0, 8));
  assert.match(prefill, /^prefill +7 tokens in [\d.]+ ms \([\d.]+ tokens\/s\)/);
  assert.match(
    decode,
    /^decode +7 tokens in [\d.]+ ms .*2 executables on wasm, appended cache of 64/,
  );
});

Deno.test("kiln generate --json gives the ids and stats; bad flags are usage errors", async () => {
  const args = ["--prompt-ids", prompt, "--max-new", "3", "--backend", "wasm", "--json"];
  const r = await kiln("generate", model, ...args, "--temperature", "0.7", "--seed", "3");
  assert.equal(r.code, 0, r.stderr);
  const out = JSON.parse(r.stdout);
  assert.equal(out.ids.length, 3);
  assert.equal(out.stats.newTokens, 3);
  const again = JSON.parse(
    (await kiln("generate", model, ...args, "--temperature", "0.7", "--seed", "3")).stdout,
  );
  assert.deepEqual(again.ids, out.ids);
  for (
    const [bad, pattern, code] of [
      [["--prompt-ids", "1,x"], /not a list of token ids.*Fix:/, 2],
      [["--prompt-ids", "1", "--top-p", "abc"], /--top-p "abc" is not a number.*Fix:/, 2],
      [["--prompt-ids", "1", "--top-p", "2"], /topP 2 is not in \(0, 1\].*Fix:/, 1],
      [[], /needs --prompt-ids.*Fix:/, 2],
    ] as const
  ) {
    const e = await kiln("generate", model, ...bad);
    assert.equal(e.code, code, e.stderr);
    assert.match(e.stderr, pattern);
  }
  const none = await kiln("generate");
  assert.equal(none.code, 2);
  assert.match(none.stderr, /needs a model.*Fix:/);
});

/** A folder holding the tiny decoder and a word-level tokenizer of its 128 ids ("w0" … "w127"). */
async function withTokenizer(config?: object): Promise<string> {
  const dir = await Deno.makeTempDir();
  await Deno.copyFile(model, `${dir}/torch_tiny.onnx`);
  const vocab = Object.fromEntries(Array.from({ length: 128 }, (_, i) => [`w${i}`, i]));
  const tokenizer = {
    version: "1.0",
    added_tokens: [],
    normalizer: null,
    pre_tokenizer: { type: "Whitespace" },
    post_processor: null,
    decoder: null,
    model: { type: "WordLevel", vocab, unk_token: "w0" },
  };
  await Deno.writeTextFile(`${dir}/tokenizer.json`, JSON.stringify(tokenizer));
  if (config) await Deno.writeTextFile(`${dir}/tokenizer_config.json`, JSON.stringify(config));
  return `${dir}/torch_tiny.onnx`;
}

Deno.test("kiln generate --prompt encodes text with the model's tokenizer.json and prints text", async () => {
  const words = (ids: number[]) => ids.map((i) => `w${i}`).join(" ");
  const text = words(recorded.torch_tiny.prompt);
  const plain = await withTokenizer();
  const args = ["--prompt", text, "--max-new", "8", "--backend", "wasm"];
  const r = await kiln("generate", plain, ...args);
  assert.equal(r.code, 0, r.stderr);
  assert.equal(r.stdout.split("\n")[0], words(recorded.torch_tiny.greedy.slice(0, 8)));
  // The config's end-of-sequence token stops the generation (w32 is the sixth greedy id).
  const eos = await withTokenizer({ eos_token: { content: "w32" } });
  const j = JSON.parse((await kiln("generate", eos, ...args, "--json")).stdout);
  assert.deepEqual(j.prompt, recorded.torch_tiny.prompt);
  assert.deepEqual(j.ids, recorded.torch_tiny.greedy.slice(0, 6));
  assert.equal(j.text, words(recorded.torch_tiny.greedy.slice(0, 6)));
  // A tokenizer.json beside the model that links to one outside its folder, and a FIFO.
  const linked = await withTokenizer();
  const beside = linked.replace(/torch_tiny\.onnx$/, "tokenizer.json");
  await Deno.rename(beside, `${plain}.outside.json`);
  await Deno.symlink(`${plain}.outside.json`, beside);
  const piped = await withTokenizer();
  const fifo = piped.replace(/torch_tiny\.onnx$/, "tokenizer.json");
  await Deno.remove(fifo);
  await new Deno.Command("mkfifo", { args: [fifo] }).output();
  for (
    const [bad, pattern] of [
      [[model, "--prompt", "w1"], /No tokenizer.json beside .*Fix: put the model's tokenizer.json/],
      [
        [linked, "--prompt", "w1"],
        /tokenizer file "tokenizer.json" leads outside the model's folder.*Fix:/,
      ],
      [[piped, "--prompt", "w1"], /tokenizer.json cannot be read: not a regular file.*Fix:/],
      [[plain, "--prompt", "w1", "--prompt-ids", "1"], /--prompt or --prompt-ids, not both.*Fix:/],
      [[plain, "--prompt", ""], /encodes to no tokens.*Fix:/],
    ] as const
  ) {
    const e = await kiln("generate", ...bad);
    assert.notEqual(e.code, 0);
    assert.match(e.stderr, pattern);
  }
});
