/**
 * `kiln generate MODEL --prompt-ids 1,2,3`: token ids from an ONNX decoder, printed as they come,
 * then prefill and decode speed (or, with `--json`, one object with the ids and the stats).
 *
 * @module
 */
import process from "node:process";
import { parseArgs } from "node:util";
import { KilnError } from "../jit/support/errors.ts";
import { OnnxModel } from "../onnx/model.ts";
import { generate, type GenerateOptions } from "../onnx/generate/generate.ts";

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

/** `kiln generate`. */
export async function generateCommand(args: string[]): Promise<number> {
  const { values, positionals } = parseArgs({
    args,
    options: {
      "prompt-ids": { type: "string" },
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
  const prompt = idList(values["prompt-ids"], "--prompt-ids");
  if (!prompt) {
    throw usage(
      "kiln generate needs --prompt-ids",
      "pass the prompt's token ids: --prompt-ids 1,2,3",
    );
  }
  const generation = generate(await OnnxModel.load(path), prompt, optionsOf(values));
  if (values.json) {
    const ids = await generation.collect();
    console.log(JSON.stringify({ model: path, prompt, ids, stats: generation.stats }));
    return 0;
  }
  for await (const id of generation) process.stdout.write(`${id} `);
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
      `${s.executables} executables, ${s.layout} cache${s.capacity ? ` of ${s.capacity}` : ""}`,
  );
  return 0;
}
