/**
 * What makes an ONNX model a decoder a generation loop can drive, read from its graph: the token
 * ids it takes, its attention mask and positions, each past cache input with the present output
 * that continues it, and the logits. Names follow the exporters (onnxruntime-genai and optimum:
 * `past_key_values.N.key` → `present.N.key`; older forms `past.N.key`, `past_key_N`), matched by
 * layer number and kind rather than by one spelling.
 *
 * @module
 */
import { KilnError } from "../../jit/support/errors.ts";
import type { BoundaryDType } from "../../jit/ir/dtype.ts";
import { type OnnxInputInfo, onnxInputs } from "../import/inputs.ts";
import { int, type ModelProto, type NodeProto, type ValueInfoProto } from "../wire/proto.ts";

/** One layer's key or value cache: the input fed the past, the output holding past and new. */
export interface DecoderCache {
  /** The past input (`[batch, heads, past, headSize]`). */
  readonly past: string;
  /** The present output (`[batch, heads, past + new, headSize]`). */
  readonly present: string;
  /** Cache heads (axis 1). */
  readonly heads: number;
  /** Head size (axis 3). */
  readonly headSize: number;
  /** Element type. */
  readonly dtype: BoundaryDType;
}

/**
 * Where a step's new cache entries land in its present outputs, which decides how a cache of
 * fixed capacity is kept:
 * - `packed`: after the valid past entries, as ONNX Runtime's GroupQueryAttention writes them
 *   (the valid length comes from the attention mask);
 * - `appended`: after the whole past, which the attention mask then marks valid or not, with
 *   positions given (`position_ids`), as attention written with Concat does;
 * - `exact`: only a past of exactly the valid length is right (no mask or no positions to tell
 *   padding apart), so every step's past has a new length.
 */
export type CacheLayout = "packed" | "appended" | "exact";

/** A decoder's inputs and outputs, as a generation loop feeds and reads them. */
export interface Decoder {
  /** The token ids input (`[batch, sequence]`, integers). */
  readonly ids: string;
  /** The attention mask input (`[batch, past + sequence]`), if the model takes one. */
  readonly mask?: string;
  /** The positions input (`[batch, sequence]`), if the model takes one. */
  readonly positions?: string;
  /** optimum's merged decoders' switch between their first-step and cached branches. */
  readonly useCache?: string;
  /** The logits output (`[batch, sequence, vocabulary]`). */
  readonly logits: string;
  /** The vocabulary's size, where the logits declare it. */
  readonly vocabulary?: number;
  /** The caches, in layer order, keys before values. */
  readonly caches: readonly DecoderCache[];
  /** How present outputs hold the new entries. */
  readonly layout: CacheLayout;
  /** Element types of the inputs besides the caches (ids, mask, positions, switch). */
  readonly dtypes: Readonly<Record<string, BoundaryDType>>;
  /**
   * Positions the model has tables for, where a table says so: rows of the rotary caches its
   * attention reads (GroupQueryAttention, RotaryEmbedding) or of a position embedding gathered
   * by the positions input.
   */
  readonly positionLimit?: number;
}

const notDecoder = (why: string) =>
  new KilnError(`This model is not a decoder kiln can generate with: ${why}`, {
    code: "unsupported",
    fix: "export the decoder with its past (optimum's --task text-generation-with-past, " +
      "onnxruntime-genai's model builder, or torch.onnx.export with past_key_values inputs and " +
      "present outputs), or run the model with OnnxModel.run",
  });

/** A cache name's layer and kind (`key`/`value`), or undefined when the name is not a cache's. */
function cacheSlot(name: string): string | undefined {
  // The last "key" or "value" in the name: `past_key_values.0.value` is a value cache.
  const kind = /(key|value)(?!.*(key|value))/i.exec(name)?.[1].toLowerCase();
  const layer = /\d+/.exec(name)?.[0];
  return kind && layer !== undefined ? `${Number(layer)}.${kind}` : undefined;
}

/** The element type of an input declared a numeric tensor, else a typed refusal naming it. */
function tensorType(info: OnnxInputInfo): BoundaryDType {
  if (info.kind !== "tensor" || info.dtype === "string") {
    throw notDecoder(`its input "${info.name}" is not a numeric tensor`);
  }
  return info.dtype;
}

/** The model's caches: each past input among `inputs` paired with its present output. */
function cachesOf(model: ModelProto, inputs: readonly OnnxInputInfo[]): DecoderCache[] {
  const presents = new Map<string, ValueInfoProto>();
  for (const o of model.graph.output) {
    const slot = /present/i.test(o.name) ? cacheSlot(o.name) : undefined;
    if (slot) presents.set(slot, o);
  }
  const caches = inputs.filter((i) => /past/i.test(i.name)).map((i) => {
    const slot = cacheSlot(i.name);
    const present = slot && presents.get(slot);
    if (!present) throw notDecoder(`the past input "${i.name}" has no present output beside it`);
    const { dims } = i;
    if (dims.length !== 4 || typeof dims[1] !== "number" || typeof dims[3] !== "number") {
      throw notDecoder(
        `the past input "${i.name}" is declared [${i.ranked ? dims : "no shape"}], not [batch, ` +
          "heads, past, head size] with numeric heads and head size",
      );
    }
    const dtype = tensorType(i);
    return { past: i.name, present: present.name, heads: dims[1], headSize: dims[3], dtype };
  });
  if (caches.length === 0) throw notDecoder("it has no past cache inputs");
  return caches.sort((a, b) => order(a.past) - order(b.past));
}

/** Sort key of a cache input: its layer, keys before values. */
function order(name: string): number {
  const [layer, kind] = cacheSlot(name)!.split(".");
  return Number(layer) * 2 + (kind === "key" ? 0 : 1);
}

/** The model's role names, found from its graph; a model that is not a decoder is a typed error. */
export function findDecoder(model: ModelProto): Decoder {
  const { output, node } = model.graph;
  // The inputs a caller feeds, as OnnxModel reads them (initializers listed as inputs left out).
  const input = onnxInputs(model);
  const names = new Set(input.map((i) => i.name));
  const caches = cachesOf(model, input);
  const pasts = new Set(caches.map((c) => c.past));
  const find = (re: RegExp) => input.find((i) => re.test(i.name) && !pasts.has(i.name))?.name;
  const ids = names.has("input_ids")
    ? "input_ids"
    : input.find((i) => /ids/i.test(i.name) && !/position/i.test(i.name))?.name;
  if (!ids) throw notDecoder("it has no token ids input (input_ids)");
  const mask = find(/attention_mask|mask/i);
  const positions = find(/position/i);
  const useCache = find(/use_cache/i);
  const known = new Set([ids, mask, positions, useCache, ...pasts]);
  const other = input.filter((i) => !known.has(i.name)).map((i) => i.name);
  if (other.length) throw notDecoder(`it takes inputs a generation loop cannot fill: ${other}`);
  const presents = new Set(caches.map((c) => c.present));
  const logits = output.find((o) => /logits/i.test(o.name))?.name ??
    output.find((o) => !presents.has(o.name))?.name;
  if (!logits) throw notDecoder("it has no logits output");
  const packed = node.some((n) => n.opType === "GroupQueryAttention");
  const layout: CacheLayout = packed && mask
    ? "packed"
    : !packed && mask && positions
    ? "appended"
    : "exact";
  const dtypes: Record<string, BoundaryDType> = {};
  for (const i of input.filter((i) => known.has(i.name) && !pasts.has(i.name))) {
    dtypes[i.name] = tensorType(i);
  }
  // The vocabulary: the logits' last axis, where it is declared a size.
  const last = output.find((o) => o.name === logits)!.type?.tensorType?.shape?.dim?.at(-1);
  const size = last && !last.dimParam ? int(last.dimValue) : 0;
  const vocabulary = size > 0 ? size : undefined;
  const positionLimit = positionTables(model, positions);
  return {
    ids,
    mask,
    positions,
    useCache,
    logits,
    vocabulary,
    caches,
    layout,
    dtypes,
    positionLimit,
  };
}

/**
 * The operand of `n` that is a table indexed by position, where it has one: GroupQueryAttention's
 * and RotaryEmbedding's cos caches (com.microsoft: operand 7 and 2; ONNX's RotaryEmbedding: 1,
 * a table only where position ids index it), a Gather by the positions input.
 */
function positionTable(n: NodeProto, positions: string | undefined): string | undefined {
  const microsoft = n.domain === "com.microsoft";
  if (n.opType === "GroupQueryAttention" && microsoft) return n.input[7];
  if (n.opType === "RotaryEmbedding") return microsoft ? n.input[2] : n.input[3] && n.input[1];
  if (n.opType === "Gather" && positions !== undefined && n.input[1] === positions) {
    return n.input[0];
  }
  return undefined;
}

/**
 * The fewest rows among the initializers read by position (`Decoder.positionLimit`): rotary cos
 * caches, and tables gathered by the positions input; undefined where none is found.
 */
function positionTables(model: ModelProto, positions: string | undefined): number | undefined {
  const rows = new Map(model.graph.initializer.map((t) => [t.name, int(t.dims?.[0] ?? 0)]));
  let fewest: number | undefined;
  for (const n of model.graph.node) {
    const table = positionTable(n, positions);
    const count = table ? rows.get(table) : undefined;
    if (count && count > 0) fewest = Math.min(fewest ?? count, count);
  }
  return fewest;
}
