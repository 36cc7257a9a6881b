/**
 * ONNX's string ops, run on the host: Cast and CastLike to and from string, StringNormalizer,
 * StringConcat, StringSplit, RegexFullMatch, Equal on strings, and the ops that only move
 * strings (Identity, Reshape, Flatten, Squeeze, Unsqueeze, Constant). Strings are not something
 * a WGSL or wasm kernel computes on, so they never reach a graph: `strings.ts` runs these around
 * the compiled numeric part. Numbers are written as ONNX's reference writes them, and read as its
 * Cast spec says.
 *
 * @module
 */
import { fromF16Bits, fromNumbers, intRange, toF16Bits } from "../../jit/ir/dtype.ts";
import { KilnError } from "../../jit/support/errors.ts";
import type { HostTensor } from "../../jit/ir/host_tensor.ts";
import { type Shape, sizeOf, stridesOf, tryBroadcast } from "../../jit/ir/shape.ts";
import {
  type AttributeProto,
  CODE_OF_DTYPE,
  dtypeOfCode,
  int,
  type NodeProto,
  type TensorProto,
} from "../wire/proto.ts";

/** A tensor of strings (ONNX `string`): host data only, row-major. */
export interface StringTensor {
  /** Always `"string"`. */
  readonly dtype: "string";
  /** The tensor's shape. */
  readonly shape: Shape;
  /** The elements, row-major. */
  readonly data: readonly string[];
}

/** A value the host stage holds: strings, or numbers. */
export type HostValue = StringTensor | HostTensor;

/** Whether `v` is a {@linkcode StringTensor}. */
export function isStringTensor(v: unknown): v is StringTensor {
  return typeof v === "object" && v !== null && (v as StringTensor).dtype === "string";
}

/** The ops {@linkcode runStringNode} runs on string tensors. */
export const HOST_STRING_OPS: ReadonlySet<string> = new Set([
  "Cast",
  "CastLike",
  "StringNormalizer",
  "StringConcat",
  "StringSplit",
  "RegexFullMatch",
  "Equal",
  "Identity",
  "Reshape",
  "Flatten",
  "Squeeze",
  "Unsqueeze",
  "Constant",
]);

/** ONNX's element type code of string. */
export const STRING = 8;

const UTF8 = new TextDecoder();

/** The strings of a string `TensorProto` (`string_data`, UTF-8). */
export function stringsOf(t: TensorProto, where: string): StringTensor {
  const shape = (t.dims ?? []).map(int);
  const data = (t.stringData ?? []).map((b) => UTF8.decode(b));
  if (data.length !== sizeOf(shape)) {
    throw new KilnError(`${where}: ${data.length} strings for shape [${shape}]`, {
      code: "bad-input",
      fix: "the model or test data is corrupt; re-export it",
    });
  }
  return { dtype: "string", shape, data };
}

/** How one node fails on the host, with the node named. */
function fail(node: NodeProto, why: string, fix: string): never {
  throw new KilnError(`node "${node.name || node.output[0]}" (${node.opType}): ${why}`, {
    code: "bad-input",
    fix,
  });
}

const attribute = (node: NodeProto, name: string): AttributeProto | undefined =>
  node.attribute.find((a) => a.name === name);
const text = (node: NodeProto, name: string, fallback: string) => {
  const s = attribute(node, name)?.s;
  return s && s.length ? UTF8.decode(s) : fallback;
};

/**
 * A float as ONNX's reference writes it (numpy's `str`): the shortest decimal that reads back as
 * the same f32 (or f16 or f64, when `same` says so), positional between 1e-4 and 1e16, else scientific
 * (`1e-05`); `NaN`, `INF` and `-INF` as ONNX's Cast spells them. (ONNX Runtime's `%.8g` is not
 * always enough digits to read back the same f32.)
 */
export function formatFloat(x: number, same = (y: number) => Math.fround(y) === x): string {
  if (Number.isNaN(x)) return "NaN";
  if (!Number.isFinite(x)) return x < 0 ? "-INF" : "INF";
  if (x === 0) return Object.is(x, -0) ? "-0.0" : "0.0";
  let v = x;
  for (let p = 1; p <= 17; p++) {
    v = Number(x.toPrecision(p));
    if (same(v)) break;
  }
  const a = Math.abs(v);
  if (a >= 1e-4 && a < 1e16) {
    const t = String(v);
    return t.includes(".") ? t : `${t}.0`;
  }
  const [mantissa, exp] = v.toExponential().split("e");
  return `${mantissa}e${exp[0]}${exp.slice(1).padStart(2, "0")}`;
}

const NUMBER = /^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$/;

/** A string as ONNX's Cast reads it: decimal or scientific, `INF`/`+INF`/`-INF`/`NaN` any case. */
function parse(node: NodeProto, s: string): number {
  const t = s.trim(), upper = t.toUpperCase();
  if (upper === "NAN") return NaN;
  if (upper === "INF" || upper === "+INF") return Infinity;
  if (upper === "-INF") return -Infinity;
  if (!NUMBER.test(t)) {
    fail(node, `"${s}" is not a number`, "cast only strings that spell numbers (e.g. 3.14, 1e-5)");
  }
  return Number(t);
}

/** Numbers parsed from strings, stored as ONNX type `code` is (a wider kiln dtype where kiln has no such one). */
function fromStrings(node: NodeProto, x: StringTensor, code: number): HostTensor {
  const dtype = dtypeOfCode(code, `node "${node.output[0]}"`);
  const values = x.data.map((s) => parse(node, s));
  const ints = (lo: number, hi: number) =>
    values.map((v) => (Number.isNaN(v) ? 0 : Math.min(hi, Math.max(lo, Math.trunc(v)))));
  let data: HostTensor["data"];
  switch (dtype) {
    case "f64":
      data = Float64Array.from(values);
      break;
    case "f32":
      data = code === 16 ? Float32Array.from(values, bf16) : Float32Array.from(values);
      break;
    case "f16":
      data = Uint16Array.from(values, toF16Bits);
      break;
    case "i64":
      data = BigInt64Array.from(ints(-(2 ** 63), 2 ** 63 - 1), (v) => BigInt(v));
      break;
    case "bool":
      data = Uint8Array.from(values, (v) => (v !== 0 ? 1 : 0));
      break;
    default: {
      const [lo, hi] = intRange(dtype)!;
      data = fromNumbers(dtype, ints(lo, hi));
    }
  }
  return { dtype, shape: x.shape, data };
}

/** `v` rounded to bfloat16 (nearest, ties to even), as the importer's Cast rounds. */
function bf16(v: number): number {
  const f = Float32Array.of(v), u = new Uint32Array(f.buffer);
  if (Number.isNaN(v)) return v;
  u[0] = (u[0] + 0x7fff + ((u[0] >>> 16) & 1)) & 0xffff0000;
  return f[0];
}

/** Numbers written as strings, as ONNX Runtime writes them. */
function toStrings(x: HostTensor): StringTensor {
  const data = x.dtype === "f16"
    ? Array.from(
      x.data as Uint16Array,
      (b) => formatFloat(fromF16Bits(b), (y) => toF16Bits(y) === b),
    )
    : x.dtype === "f32"
    ? Array.from(x.data as Float32Array, (v) => formatFloat(v))
    : x.dtype === "f64"
    ? Array.from(x.data as Float64Array, (v) => formatFloat(v, (y) => y === v))
    : Array.from(x.data as ArrayLike<number | bigint>, String);
  return { dtype: "string", shape: x.shape, data };
}

/** The elements of `a` and `b` broadcast together, combined by `f`. */
function broadcast<T>(
  node: NodeProto,
  a: StringTensor,
  b: StringTensor,
  f: (x: string, y: string) => T,
): { shape: Shape; data: T[] } {
  const shape = tryBroadcast([a.shape, b.shape]);
  if (!shape) fail(node, `shapes [${a.shape}] and [${b.shape}] do not broadcast`, "fix the shapes");
  const at = (t: StringTensor) => {
    const s = stridesOf(t.shape), pad = shape.length - t.shape.length;
    return (i: number) => {
      let off = 0;
      for (let d = shape.length - 1, rest = i; d >= 0; d--) {
        const k = rest % shape[d];
        rest = (rest - k) / shape[d];
        if (d >= pad && t.shape[d - pad] !== 1) off += k * s[d - pad];
      }
      return t.data[off];
    };
  };
  const ia = at(a), ib = at(b);
  return { shape, data: Array.from({ length: sizeOf(shape) }, (_, i) => f(ia(i), ib(i))) };
}

/** StringNormalizer: drop stop words, then change case; all dropped leaves one "". */
function normalize(node: NodeProto, x: StringTensor): StringTensor {
  const rows = x.shape.length === 2 ? x.shape[0] : 1;
  if (x.shape.length > 2 || x.shape.length === 0 || rows !== 1) {
    fail(node, `input of shape [${x.shape}]`, "pass a [C] or [1, C] tensor of strings");
  }
  const action = text(node, "case_change_action", "NONE");
  if (!["NONE", "LOWER", "UPPER"].includes(action)) {
    fail(node, `case_change_action "${action}"`, "use NONE, LOWER or UPPER");
  }
  const sensitive = int(attribute(node, "is_case_sensitive")?.i) === 1;
  const fold = (s: string) => (sensitive ? s : s.toLowerCase());
  const stop = new Set(
    (attribute(node, "stopwords")?.strings ?? []).map((b) => fold(UTF8.decode(b))),
  );
  const change = (s: string) =>
    action === "LOWER" ? s.toLowerCase() : action === "UPPER" ? s.toUpperCase() : s;
  let kept = x.data.filter((s) => !stop.has(fold(s))).map(change);
  if (kept.length === 0) kept = [""];
  return {
    dtype: "string",
    shape: x.shape.length === 2 ? [1, kept.length] : [kept.length],
    data: kept,
  };
}

/** StringSplit: each string split on `delimiter` (runs of whitespace when unset), padded with "". */
function split(node: NodeProto, x: StringTensor): HostValue[] {
  const delimiter = text(node, "delimiter", "");
  const most = attribute(node, "maxsplit") ? int(attribute(node, "maxsplit")!.i) : Infinity;
  const parts = x.data.map((s) => {
    const words = delimiter ? s.split(delimiter) : s.trim().split(/\s+/).filter((w) => w);
    if (words.length - 1 <= most) return words;
    const head = words.slice(0, most);
    // The rest stays whole: everything after the last split point.
    const rest = delimiter
      ? words.slice(most).join(delimiter)
      : s.trim().replace(new RegExp(`^(\\S+\\s+){${most}}`), "");
    return [...head, rest];
  });
  const width = Math.max(0, ...parts.map((p) => p.length));
  const data = parts.flatMap((p) => [...p, ...Array(width - p.length).fill("")]);
  return [
    { dtype: "string", shape: [...x.shape, width], data },
    { dtype: "i64", shape: x.shape, data: BigInt64Array.from(parts, (p) => BigInt(p.length)) },
  ];
}

/** A regular expression matched against whole strings (RE2's syntax, as far as JavaScript shares it). */
function fullMatch(node: NodeProto, x: StringTensor): HostTensor {
  const pattern = text(node, "pattern", "");
  let re: RegExp;
  try {
    re = new RegExp(`^(?:${pattern})$`, "u");
  } catch (e) {
    fail(node, `pattern /${pattern}/ is not valid (${(e as Error).message})`, "fix the pattern");
  }
  return { dtype: "bool", shape: x.shape, data: Uint8Array.from(x.data, (s) => +re.test(s)) };
}

/** Integers of a numeric host tensor (a shape or axes input). */
const ints = (t: HostValue | undefined): number[] =>
  t && !isStringTensor(t) ? Array.from(t.data as ArrayLike<number | bigint>, Number) : [];

/** The shape Reshape gives `x`: ONNX's 0 (copy, unless allowzero) and −1 (inferred). */
function reshaped(node: NodeProto, x: StringTensor, target: number[]): Shape {
  const zero = int(attribute(node, "allowzero")?.i) === 1;
  const shape = target.map((d, i) => (d === 0 && !zero ? x.shape[i] : d));
  const known = shape.filter((d) => d !== -1).reduce((p, d) => p * d, 1);
  const out = shape.map((d) => (d === -1 ? sizeOf(x.shape) / known : d));
  if (sizeOf(out) !== x.data.length || out.some((d) => !Number.isInteger(d) || d < 0)) {
    fail(node, `cannot reshape [${x.shape}] to [${target}]`, "keep the element count");
  }
  return out;
}

/** The axes of Squeeze/Unsqueeze: the attribute (before opset 13) or the second input. */
const axesOf = (node: NodeProto, given: HostValue | undefined, rank: number) =>
  (attribute(node, "axes")?.ints?.map(int) ?? ints(given)).map((a) => (a < 0 ? a + rank : a));

/**
 * Runs string-touching node `node` on `inputs` (undefined where an optional input is left out).
 * Anything else with a string operand is a typed error: kiln has no kernels for strings.
 */
export function runStringNode(node: NodeProto, inputs: (HostValue | undefined)[]): HostValue[] {
  const x = inputs[0];
  const strings = (v: HostValue | undefined, what = "its input"): StringTensor => {
    if (!isStringTensor(v)) fail(node, `${what} is not a string tensor`, "pass strings");
    return v;
  };
  switch (node.opType) {
    case "Cast":
    case "CastLike": {
      const like = inputs[1];
      const to = node.opType === "Cast"
        ? int(attribute(node, "to")?.i)
        : isStringTensor(like)
        ? STRING
        : CODE_OF_DTYPE[like!.dtype];
      if (to === STRING) return [isStringTensor(x) ? x : toStrings(x!)];
      return [fromStrings(node, strings(x), to)];
    }
    case "StringNormalizer":
      return [normalize(node, strings(x))];
    case "StringConcat": {
      const { shape, data } = broadcast(node, strings(x), strings(inputs[1]), (a, b) => a + b);
      return [{ dtype: "string", shape, data }];
    }
    case "Equal": {
      const { shape, data } = broadcast(node, strings(x), strings(inputs[1]), (a, b) => a === b);
      return [{ dtype: "bool", shape, data: Uint8Array.from(data, Number) }];
    }
    case "StringSplit":
      return split(node, strings(x));
    case "RegexFullMatch":
      return [fullMatch(node, strings(x))];
    case "Identity":
      return [strings(x)];
    case "Reshape": {
      const s = strings(x), shape = reshaped(node, s, ints(inputs[1]));
      return [{ ...s, shape }];
    }
    case "Flatten": {
      const s = strings(x), rank = s.shape.length;
      const axis = (a: number) => (a < 0 ? a + rank : a);
      const k = axis(attribute(node, "axis") ? int(attribute(node, "axis")!.i) : 1);
      return [{ ...s, shape: [sizeOf(s.shape.slice(0, k)), sizeOf(s.shape.slice(k))] }];
    }
    case "Squeeze": {
      const s = strings(x), axes = axesOf(node, inputs[1], s.shape.length);
      const keep = s.shape.filter((d, i) => (axes.length ? !axes.includes(i) : d !== 1));
      return [{ ...s, shape: keep }];
    }
    case "Unsqueeze": {
      const s = strings(x),
        rank = s.shape.length + ints(inputs[1]).length +
          (attribute(node, "axes")?.ints?.length ?? 0);
      const axes = axesOf(node, inputs[1], rank), shape = [...s.shape];
      for (const a of [...axes].sort((p, q) => p - q)) shape.splice(a, 0, 1);
      return [{ ...s, shape }];
    }
    case "Constant":
      return [constantStrings(node)];
  }
  return fail(
    node,
    "kiln runs this op on numbers only, and one of its inputs or outputs is a string tensor",
    `string ops kiln runs: ${[...HOST_STRING_OPS].join(", ")}`,
  );
}

/** A Constant node's strings (`value` of type string, or `value_strings`). */
export function constantStrings(node: NodeProto): StringTensor {
  const value = attribute(node, "value")?.t;
  if (value) return stringsOf(value, `node "${node.output[0]}"`);
  const list = attribute(node, "value_strings")?.strings ?? [];
  return { dtype: "string", shape: [list.length], data: list.map((b) => UTF8.decode(b)) };
}
