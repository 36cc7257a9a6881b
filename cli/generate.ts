/**
 * `kiln generate MODEL --prompt-ids 1,2,3`: token ids from an ONNX decoder, printed as they come,
 * then prefill and decode speed (or, with `--json`, one object with the ids and the stats).
 * `--prompt TEXT` encodes text with the model's `tokenizer.json` (`tokenizer.ts`), prints the text
 * as it comes and stops at the end-of-sequence token its config names.
 *
 * @module
 */
import process from "node:process";
import { parseArgs } from "node:util";
import { KilnError } from "../jit/support/errors.ts";
import { OnnxModel } from "../onnx/model.ts";
import { generate, type GenerateOptions } from "../onnx/generate/generate.ts";
import { loadTokenizer, type TextTokenizer } from "./tokenizer.ts";

const usage = (what: string, fix: string) => new KilnError(what, { code: "usage", fix });

/** A comma-separated list of whole numbers, or a usage error naming `flag`. */
function idList(text: string | undefined, flag: string): number[] | undefined {
  if (text === undefined) return undefined;
  const ids = text.split(",").map((t) => t.trim());
  if (ids.some((t) => !/^\d+$/.test(t))) {
    throw usage(`${flag} "${text}" is not a list of token ids`, `write ${flag} 1,2,3`);
  }
  return ids.map(Number);
}

/** A number option, or a usage error naming `flag` (the library checks its range). */
function numberOf(text: string | undefined, flag: string): number | undefined {
  if (text === undefined) return undefined;
  const n = Number(text);
  if (text.trim() === "" || !Number.isFinite(n)) {
    throw usage(`${flag} "${text}" is not a number`, `write e.g. ${flag} 1`);
  }
  return n;
}

/** The generation options the flags give. */
function optionsOf(values: Record<string, string | boolean | undefined>): GenerateOptions {
  const text = (k: string) => values[k] as string | undefined;
  const backend = text("backend");
  const entries = {
    maxNewTokens: numberOf(text("max-new"), "--max-new"),
    temperature: numberOf(text("temperature"), "--temperature"),
    topK: numberOf(text("top-k"), "--top-k"),
    topP: numberOf(text("top-p"), "--top-p"),
    seed: numberOf(text("seed"), "--seed"),
    capacity: numberOf(text("capacity"), "--capacity"),
    stopIds: idList(text("stop-ids"), "--stop-ids"),
    backend: backend && backend !== "auto" ? backend : undefined,
  };
  return Object.fromEntries(Object.entries(entries).filter(([, v]) => v !== undefined));
}

/** The prompt's ids (from `--prompt-ids`, or `--prompt` through the model's tokenizer). */
async function promptOf(
  values: Record<string, string | boolean | undefined>,
  path: string,
): Promise<{ prompt: number[]; tokenizer?: TextTokenizer }> {
  const ids = idList(values["prompt-ids"] as string | undefined, "--prompt-ids");
  const text = values.prompt as string | undefined;
  if (ids && text !== undefined) {
    throw usage("kiln generate takes --prompt or --prompt-ids, not both", "pass one of them");
  }
  if (ids) return { prompt: ids };
  if (text === undefined) {
    throw usage(
      "kiln generate needs --prompt-ids or --prompt",
      "pass the prompt's token ids (--prompt-ids 1,2,3) or its text (--prompt TEXT, with the model's tokenizer.json beside it)",
    );
  }
  const tokenizer = await loadTokenizer(path);
  const prompt = tokenizer.encode(text);
  if (!prompt.length) {
    throw usage(`--prompt "${text}" encodes to no tokens`, "pass some text");
  }
  return { prompt, tokenizer };
}

/**
 * The generation's text as it comes: the whole of it decoded again at each token and what is new
 * printed (a token alone may be part of a character or of a word the next one completes).
 */
async function printText(generation: AsyncIterable<number>, tokenizer: TextTokenizer) {
  const ids: number[] = [];
  let shown = "";
  for await (const id of generation) {
    ids.push(id);
    const text = tokenizer.decode(ids);
    if (!text.startsWith(shown)) continue;
    process.stdout.write(text.slice(shown.length));
    shown = text;
  }
  const text = tokenizer.decode(ids);
  if (text !== shown) {
    process.stdout.write(text.startsWith(shown) ? text.slice(shown.length) : `\n${text}`);
  }
}

/** `kiln generate`. */
export async function generateCommand(args: string[]): Promise<number> {
  const { values, positionals } = parseArgs({
    args,
    options: {
      "prompt-ids": { type: "string" },
      prompt: { type: "string" },
      "max-new": { type: "string" },
      backend: { type: "string" },
      temperature: { type: "string" },
      "top-k": { type: "string" },
      "top-p": { type: "string" },
      seed: { type: "string" },
      "stop-ids": { type: "string" },
      capacity: { type: "string" },
      json: { type: "boolean", default: false },
    },
    allowPositionals: true,
  });
  const [path] = positionals;
  if (!path) {
    throw usage("kiln generate needs a model", "kiln generate MODEL.onnx --prompt-ids 1,2,3");
  }
  const { prompt, tokenizer } = await promptOf(values, path);
  const options = optionsOf(values);
  const stops = options.stopIds ?? (tokenizer?.eos === undefined ? undefined : [tokenizer.eos]);
  const generation = generate(await OnnxModel.load(path), prompt, { ...options, stopIds: stops });
  if (values.json) {
    const ids = await generation.collect();
    const text = tokenizer ? { text: tokenizer.decode(ids) } : {};
    console.log(JSON.stringify({ model: path, prompt, ids, ...text, stats: generation.stats }));
    return 0;
  }
  if (tokenizer) await printText(generation, tokenizer);
  else {
    for await (const id of generation) process.stdout.write(`${id} `);
  }
  process.stdout.write("\n");
  const s = generation.stats!;
  const rate = (n: number) => `${n.toFixed(1)} tokens/s`;
  console.log(
    `prefill  ${s.promptTokens} tokens in ${s.prefillMs.toFixed(1)} ms (${
      rate(s.prefillTokensPerSecond)
    })`,
  );
  console.log(
    `decode   ${s.newTokens - 1} tokens in ${s.decodeMs.toFixed(1)} ms (${
      rate(s.decodeTokensPerSecond)
    }); ` +
      `${s.executables} executables on ${s.backend ?? "no backend"}, ${s.layout} cache${
        s.capacity ? ` of ${s.capacity}` : ""
      }`,
  );
  return 0;
}
