/**
 * Text in and out of `kiln generate --prompt`: the model's own tokenizer, `tokenizer.json` beside
 * it (with `tokenizer_config.json` where there is one), read by Hugging Face's
 * `@huggingface/tokenizers` (pure JavaScript, no dependencies), loaded only when text is asked
 * for: ids in and out need no package.
 *
 * @module
 */
import { dirname, join } from "node:path";
import { KilnError } from "../jit/support/errors.ts";
import { optionalPackage } from "../jit/support/packages.ts";
import { type BesideFile, readBeside } from "../onnx/import/external_data.ts";

/** The `@huggingface/tokenizers` version kiln loads (Node: whatever the project installed). */
export const TOKENIZERS_VERSION = "0.2.0";

/** A model's tokenizer as `kiln generate` uses it. */
export interface TextTokenizer {
  /** The ids of `text`, special tokens added as the model's tokenizer adds them. */
  encode(text: string): number[];
  /** The text of `ids`, special tokens left out. */
  decode(ids: readonly number[]): string;
  /** The id of the end-of-sequence token its config names, if it names one. */
  readonly eos?: number;
}

/** What kiln uses of the package's `Tokenizer`. */
interface HfTokenizer {
  encode(text: string): { ids: number[] };
  decode(ids: number[], options: { skip_special_tokens: boolean }): string;
  token_to_id(token: string): number | undefined;
}

/** The package's exports kiln uses. */
interface TokenizersModule {
  Tokenizer: new (tokenizer: object, config: object) => HfTokenizer;
}

/** The tokenizer's files, read as the model's external data is (`readBeside`). */
const TOKENIZER_FILE: BesideFile = {
  what: "tokenizer file",
  fix: "keep the tokenizer's files themselves (not links to elsewhere) in the model's folder",
};

/**
 * A JSON file of the model's folder, or `undefined` where `optional` and it is missing. Nothing a
 * link leads outside the folder to is read, and only a regular file (a FIFO would hang the read).
 */
async function jsonBeside(
  model: string,
  name: string,
  optional: boolean,
): Promise<object | undefined> {
  const path = join(dirname(model), name);
  let text: string;
  try {
    text = new TextDecoder().decode(await readBeside(dirname(model), name, TOKENIZER_FILE));
  } catch (e) {
    if (e instanceof KilnError) throw e;
    const missing = (e as { code?: unknown }).code === "ENOENT";
    if (missing && optional) return undefined;
    throw new KilnError(
      missing
        ? `No ${name} beside ${model}: --prompt needs the model's tokenizer`
        : `${path} cannot be read: ${(e as Error).message}`,
      {
        code: "usage",
        fix:
          `put the model's ${name} in its folder (the Hub repository has it), or pass token ids with --prompt-ids`,
      },
    );
  }
  try {
    const value = JSON.parse(text);
    if (typeof value === "object" && value !== null) return value;
  } catch { /* reported below */ }
  throw new KilnError(`${path} is not a JSON object`, {
    code: "usage",
    fix: `replace ${name} with the model's own (a tokenizer saved by Hugging Face's libraries)`,
  });
}

/** The package, or a typed error saying how to get it. */
function tokenizers(): Promise<TokenizersModule> {
  return optionalPackage<TokenizersModule>(
    "@huggingface/tokenizers",
    TOKENIZERS_VERSION,
    (e, deno) =>
      new KilnError(`@huggingface/tokenizers could not be loaded: ${String(e)}`, {
        code: "backend",
        fix: deno
          ? `allow Deno to fetch npm:@huggingface/tokenizers@${TOKENIZERS_VERSION}, or pass --prompt-ids`
          : "npm install @huggingface/tokenizers, or pass --prompt-ids",
      }),
  );
}

/** The token a config entry names (`"</s>"` or `{ content: "</s>" }`). */
function tokenName(entry: unknown): string | undefined {
  if (typeof entry === "string") return entry;
  const content = (entry as { content?: unknown } | null)?.content;
  return typeof content === "string" ? content : undefined;
}

/** The tokenizer of the model at `model` (a file path): its folder's `tokenizer.json`. */
export async function loadTokenizer(model: string): Promise<TextTokenizer> {
  const json = (await jsonBeside(model, "tokenizer.json", false))!;
  const config = await jsonBeside(model, "tokenizer_config.json", true) ?? {};
  const { Tokenizer } = await tokenizers();
  let hf: HfTokenizer;
  try {
    hf = new Tokenizer(json, config);
  } catch (e) {
    throw new KilnError(`tokenizer.json beside ${model} could not be read: ${String(e)}`, {
      code: "usage",
      fix: "use the model's own tokenizer.json (one Hugging Face's tokenizers library saved)",
    });
  }
  const eosName = tokenName((config as { eos_token?: unknown }).eos_token);
  const eos = eosName === undefined ? undefined : hf.token_to_id(eosName);
  return {
    encode: (text) => hf.encode(text).ids,
    decode: (ids) => hf.decode([...ids], { skip_special_tokens: true }),
    ...(eos === undefined ? {} : { eos }),
  };
}
