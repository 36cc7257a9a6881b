/**
 * ONNX ops mapped to kiln ops that a program registered: `registerOnnxOp` says which ONNX
 * (domain, op type, opset range) imports as which kiln op (one made with `registerOp`, or a
 * built-in), and `toOnnx` writes such ops back in their domain. Ops registered with `registerOp`
 * but not mapped travel in kiln's own domain (`ai.kiln`) under their kiln name, so a graph that
 * uses them round-trips through ONNX in the process that registered them.
 *
 * @module
 */
import { customOp } from "../../jit/runtime/custom_op.ts";
import { KilnError } from "../../jit/support/errors.ts";
import { type Attrs, type AttrValue, opNames } from "../../jit/ops/mod.ts";
import { attribute, type Converter, type NodeContext } from "./node_context.ts";
import { type AttributeProto, tensorOf } from "../wire/proto.ts";

/** kiln's own ONNX domain: registered ops without a mapping of their own are written there. */
export const KILN_DOMAIN = "ai.kiln";

/** Which ONNX op imports as which kiln op. */
export interface OnnxOpMapping {
  /** The ONNX domain (`""` for the default one, for an op type it does not define). */
  readonly domain: string;
  /** The ONNX op type. */
  readonly opType: string;
  /** The domain's opset versions it applies to, inclusive (default: all). */
  readonly opsets?: readonly [number, number];
  /** The kiln op it imports as (registered with `registerOp`, or built in). */
  readonly op: string;
  /**
   * The kiln op's attributes from the node's ONNX attributes (default: each attribute as it is,
   * by name: ints, floats, strings, tensors).
   */
  readonly attributes?: (onnx: Readonly<Record<string, AttrValue>>) => Attrs;
}

const mappings: OnnxOpMapping[] = [];

/**
 * Maps an ONNX op to a kiln op, so models using it import (on every backend with a kernel for
 * the kiln op) and `toOnnx` writes the kiln op back as it.
 *
 * @example
 * ```ts
 * import { registerOp } from "../../jit/runtime/custom_op.ts";
 * import { registerOnnxOp } from "./registered_ops.ts";
 * registerOp({
 *   name: "example.Swish",
 *   inferShape: ([x]) => x,
 *   reference: ([x]) => (x.data as Float32Array).map((v) => v / (1 + Math.exp(-v))),
 * });
 * registerOnnxOp({ domain: "com.example", opType: "Swish", op: "example.Swish" });
 * ```
 */
export function registerOnnxOp(mapping: OnnxOpMapping): void {
  const { domain, opType, op, opsets } = mapping ?? {};
  const bad = (why: string, fix: string) =>
    new KilnError(`registerOnnxOp: ${why}`, { code: "bad-attribute", fix });
  if (typeof domain !== "string" || typeof opType !== "string" || !opType) {
    throw bad(
      "it needs a domain and an op type",
      'pass { domain: "com.example", opType: "Swish", op }',
    );
  }
  if (typeof op !== "string" || !opNames().includes(op)) {
    throw bad(`kiln has no op "${op}"`, "register the kiln op with registerOp first");
  }
  if (opsets && !(opsets[0] >= 1 && opsets[1] >= opsets[0])) {
    throw bad(`opsets [${opsets}] is not a range`, "pass [first, last] versions, e.g. [1, 1]");
  }
  const i = mappings.findIndex((m) => m.domain === domain && m.opType === opType);
  if (i >= 0) mappings.splice(i, 1);
  mappings.push(mapping);
}

/** The registered mapping of (`domain`, `opType`) at opset `version` of that domain. */
function mappingOf(domain: string, opType: string, version: number): OnnxOpMapping | undefined {
  const d = domain === "ai.onnx" ? "" : domain;
  return mappings.find((m) =>
    m.domain === d && m.opType === opType &&
    (!m.opsets || (version >= m.opsets[0] && version <= m.opsets[1]))
  );
}

/** An attribute's value as kiln attributes hold it. */
function valueOf(a: AttributeProto, where: string): AttrValue | undefined {
  const text = (b: Uint8Array) => new TextDecoder().decode(b);
  switch (a.type) {
    case 1:
      return a.f ?? 0;
    case 2:
      return Number(a.i ?? 0);
    case 3:
      return text(a.s ?? new Uint8Array());
    case 4:
      return a.t ? tensorOf(a.t, where) : undefined;
    case 6:
      return [...(a.floats ?? [])];
    case 7:
      return (a.ints ?? []).map(Number);
    default:
      return undefined;
  }
}

/** The converter of a registered op: inputs as they are, attributes mapped. */
function converter(mapping: OnnxOpMapping): Converter {
  return (c: NodeContext) => {
    const onnx: Record<string, AttrValue> = {};
    for (const a of c.node.attribute ?? []) {
      const v = valueOf(attribute(c, a.name)!, `${c.label} attribute ${a.name}`);
      if (v !== undefined) onnx[a.name] = v;
    }
    const attrs = mapping.attributes ? mapping.attributes(onnx) : onnx;
    return c.emit(mapping.op, c.inputs(), attrs, c.node.output.length);
  };
}

/**
 * The converter a program registered for (`domain`, `opType`) at `version`, or, in kiln's own
 * domain, the op registered with `registerOp` under that name.
 */
export function registeredConverter(
  domain: string,
  opType: string,
  version: number,
): Converter | undefined {
  const mapping = mappingOf(domain, opType, version);
  if (mapping) return converter(mapping);
  if (domain === KILN_DOMAIN && customOp(opType)) return converter({ domain, opType, op: opType });
  return undefined;
}

/**
 * How `toOnnx` writes kiln op `op` when it was registered with `registerOp`: the latest mapping
 * that passes attributes as they are (one with an `attributes` function cannot be inverted), else
 * kiln's own domain under the op's name; `undefined` for a built-in op (written as ONNX's own).
 */
export function onnxNameOf(
  op: string,
): { domain: string; opType: string; version: number } | undefined {
  if (!customOp(op)) return undefined;
  const m = mappings.findLast((x) => x.op === op && !x.attributes);
  if (m) return { domain: m.domain, opType: m.opType, version: m.opsets?.[0] ?? 1 };
  return { domain: KILN_DOMAIN, opType: op, version: 1 };
}
