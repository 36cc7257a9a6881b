/**
 * Integer products over bytes, for a backend whose integer dot products multiply bytes exactly
 * (WebAssembly's relaxed `i32x4.relaxed_dot_i8x16_i7x16_add_s` where the engine computes it for
 * unsigned bytes without saturating: x86 with VNNI, `exactByteDot`).
 *
 * The importer writes a quantized product as an IntegerMatMul (or IntegerConv) of the activation
 * less its zero point, in i16, by a constant weight less its own. Where the activation is an
 * 8-bit x less a scalar zero point z, and the weight, shifted, fits in i8, the product becomes
 * the unsigned byte x + c (c = 0 for u8, 128 for i8) times the i8 weight, less (z + c) times the
 * weight's sums along K: Σ (x − z)·w = Σ (x + c)·w − (z + c)·Σ w, exact in i32. A convolution's
 * padding becomes a Pad of the byte by z + c first, so that a padded tap still adds nothing.
 * The tiles then take four products an instruction where the i16 pairs took two, and the
 * activation's shifted i16 copy is no longer computed.
 *
 * @module
 */
import {
  boundaryOf,
  freshNames,
  Graph,
  type Node,
  type NodeSpec,
  nodeSpecOf,
  producerOf,
} from "../ir/graph.ts";
import { handOver } from "../ir/hand_over.ts";
import type { HostTensor } from "../ir/host_tensor.ts";
import type { Attrs, ValueType } from "../ops/mod.ts";
import { sizeOf } from "../ir/shape.ts";
import { byteOperands } from "../ops/integer_matmul.ts";
import { decompose } from "./decompose.ts";

/** The largest product of an unsigned byte by a signed one: the byte products' `bound`. */
const BYTE_BOUND = 255 * 128;

/** Most bytes of a convolution's whole indirection table on wasm (`TABLE_LIMIT`, matmul_plan.ts). */
const WHOLE_TABLE = 2 ** 24;

/** The ops whose decompositions write quantized products as IntegerMatMul or IntegerConv. */
const QUANTIZED = new Set([
  "MatMulInteger",
  "ConvInteger",
  "QLinearMatMul",
  "QLinearConv",
  "QGemm",
]);

/**
 * `given` with its shifted 8-bit products over bytes (`given` itself where there is none). The
 * quantized ops a program built them of are written out first (the importer already has).
 */
export function byteProducts(given: Graph): Graph {
  const graph = decompose(given, (n) => QUANTIZED.has(n.op));
  const fresh = freshNames(graph);
  const rewrites = new Map<number, NodeSpec[]>();
  for (const n of graph.nodes) {
    if (n.op !== "IntegerMatMul" && n.op !== "IntegerConv") continue;
    const nodes = byteProduct(graph, n, fresh);
    if (nodes) rewrites.set(n.id, nodes);
  }
  if (rewrites.size === 0) return given;
  const nodes = graph.nodes.flatMap((n) => rewrites.get(n.id) ?? [nodeSpecOf(graph, n)]);
  return withoutUnread(Graph.create({ ...boundaryOf(graph), nodes }));
}

/** An activation shifted by a scalar zero point: the 8-bit `x` and the zero's value (or none). */
interface Shifted {
  readonly x: number;
  readonly zero?: number;
}

/**
 * The product `n` over bytes (see the module note), as the nodes that replace it; `undefined`
 * where its operands are not a shifted 8-bit activation and a constant weight that fits i8.
 */
function byteProduct(
  graph: Graph,
  n: Node,
  fresh: (base: string) => string,
): NodeSpec[] | undefined {
  const conv = n.op === "IntegerConv";
  const shifted = shiftedByte(graph, n.inputs[0]);
  const weight = constantData(graph, n.inputs[1]);
  const w = graph.values[n.inputs[1]];
  if (!shifted || !weight || (!conv && w.shape.length !== 2)) return undefined;
  if (conv && (Number(n.attrs.group ?? 1) !== 1 || (n.attrs.auto_pad ?? "NOTSET") !== "NOTSET")) {
    return undefined;
  }
  const xType = graph.values[shifted.x];
  // A convolution's patches are padded to a multiple of 4 below (see `paddedConv`).
  if (!conv && !byteOperands({ ...xType, dtype: "u8" }, { ...w, dtype: "i8" }, w.shape[0])) {
    return undefined;
  }
  const weightI8 = int8Of(weight);
  if (!weightI8) return undefined;
  const name = (v: number) => graph.values[v].name;
  const out = name(n.outputs[0]);
  const nodes: NodeSpec[] = [];
  const add = (op: string, inputs: string[], attrs = {}, base = `${out}/bytes`) => {
    const output = fresh(base);
    nodes.push({ op, inputs, outputs: [output], attrs });
    return output;
  };
  const constant = (value: number) =>
    add("Constant", [], { value: { data: Int32Array.of(value), shape: [], dtype: "i32" } });
  const signed = xType.dtype === "i8", c = signed ? 128 : 0;
  // The unsigned byte x + c, and the offset z + c it is less (a number where z is a constant).
  const byte = signed
    ? add("Cast", [add("Add", [add("Cast", [name(shifted.x)], { to: "i32" }), constant(c)])], {
      to: "u8",
    })
    : name(shifted.x);
  const known = shifted.zero === undefined ? 0 : scalarOf(graph, shifted.zero);
  const offset = known !== undefined
    ? known + c
    : add("Add", [add("Cast", [name(shifted.zero!)], { to: "i32" }), constant(c)]);
  let bytes: HostTensor = { data: weightI8, shape: w.shape, dtype: "i8" };
  const sums = columnSums(weightI8, w.shape, conv);
  // The byte product's own bounds (its bytes reach 255 where an i8 activation less its zero
  // point reached 128): its float decomposition works out its own chunks of K from them.
  const { parts: _parts, ...given } = n.attrs;
  let a = byte, attrs: Attrs = { ...given, bound: BYTE_BOUND, max_a: 255 };
  if (conv) {
    const padded = paddedConv(
      n,
      { byte, offset, weight: bytes, out: graph.values[n.outputs[0]] },
      add,
    );
    if (!padded) return undefined;
    [a, bytes] = [padded.input, padded.weight];
    attrs = { ...attrs, ...(padded.pads && { pads: padded.pads }) };
  }
  // The pass's own arrays: the graph keeps them without a copy (BERT-base int8: 0.46 s).
  handOver(bytes.data);
  handOver(sums.data);
  const weightBytes = add("Constant", [], { value: bytes }, `${out}/weight`);
  const product = add(n.op, [a, weightBytes], attrs, `${out}/byte_product`);
  // (z + c)·Σw: a constant where z is one.
  const correction = typeof offset === "number"
    ? add("Constant", [], { value: scaled(sums, offset) }, `${out}/correction`)
    : add("Mul", [offset, add("Constant", [], { value: sums }, `${out}/sums`)]);
  nodes.push({ op: "Sub", inputs: [product, correction], outputs: [out], name: n.name });
  return nodes;
}

/**
 * A convolution's byte input and i8 weights padded as its byte product needs: its spatial pads
 * become a Pad by the offset (a padded tap then adds nothing), and channels of zero weight are
 * added until the patches' length is a multiple of 4, the byte tiles' words (ResNet's stem: 3
 * channels of 49 taps, which took exact float slices); the conv's own pads then zeros. `undefined`
 * where spatial pads meet a runtime offset (Pad's value is an attribute).
 */
function paddedConv(
  n: Node,
  { byte, offset, weight, out }: {
    byte: string;
    offset: number | string;
    weight: HostTensor;
    out: ValueType;
  },
  add: (op: string, inputs: string[], attrs?: object) => string,
): { input: string; weight: HostTensor; pads?: number[] } | undefined {
  const pads = (n.attrs.pads as number[] | undefined) ?? [];
  const [m, c, ...window] = weight.shape, taps = sizeOf(window);
  let more = 0;
  while (((c + more) * taps) % 4 !== 0) more++;
  // A padded channel does not factor the patches' table into taps: whole, it must fit the tiles'
  // table (a batch of stems past it would gather through the index map, slower than the slices).
  const [images, , ...pixels] = out.shape;
  if (more && images * sizeOf(pixels) * (c + more) * taps * 4 > WHOLE_TABLE) return undefined;
  const spatial = pads.some((p) => p !== 0);
  if (spatial && typeof offset !== "number") return undefined;
  if (!spatial && more === 0) return { input: byte, weight };
  const [top = 0, left = 0, bottom = 0, right = 0] = pads;
  const input = add("Pad", [byte], {
    pads: [0, top, left, more, bottom, right],
    axes: [1, 2, 3],
    mode: "constant",
    value: typeof offset === "number" ? offset : 0,
  });
  const data = new Int8Array(m * (c + more) * taps);
  for (let o = 0; o < m; o++) {
    data.set(
      (weight.data as Int8Array).subarray(o * c * taps, (o + 1) * c * taps),
      o * (c + more) * taps,
    );
  }
  const grown = { data, shape: [m, c + more, ...window], dtype: "i8" } as HostTensor;
  return { input, weight: grown, ...(pads.length && { pads: pads.map(() => 0) }) };
}

/**
 * Value `v` as `Cast(to i16)` of an 8-bit `x` (less a scalar zero point: the i32 Cast of an 8-bit
 * one, or an i32 constant of the byte's range, as the importer folds that Cast), as `shiftedInt`
 * in `integer_products.ts` writes a quantized activation; `undefined` otherwise.
 */
function shiftedByte(graph: Graph, v: number): Shifted | undefined {
  const cast = producerOf(graph, v);
  if (cast?.op !== "Cast" || graph.values[v].dtype !== "i16") return undefined;
  const eight = (u: number) => ["u8", "i8"].includes(graph.values[u].dtype);
  const from = cast.inputs[0];
  if (eight(from)) return { x: from };
  const sub = producerOf(graph, from);
  if (sub?.op !== "Sub") return undefined;
  const [x, z] = sub.inputs.map((u) => producerOf(graph, u));
  if (x?.op !== "Cast" || !eight(x.inputs[0])) return undefined;
  const zero = sub.inputs[1], signed = graph.values[x.inputs[0]].dtype === "i8";
  if (sizeOf(graph.values[zero].shape) !== 1) return undefined;
  if (z?.op === "Cast" && eight(z.inputs[0])) return { x: x.inputs[0], zero: z.inputs[0] };
  const known = scalarOf(graph, zero);
  const fits = known !== undefined &&
    (signed ? known >= -128 && known <= 127 : known >= 0 && known <= 255);
  return fits ? { x: x.inputs[0], zero } : undefined;
}

/**
 * The data of constant `v`: a Constant node's (the importer's shifted weights are; a param's data
 * may change after the compile).
 */
function constantData(graph: Graph, v: number): HostTensor["data"] | undefined {
  const node = producerOf(graph, v);
  return node?.op === "Constant" ? (node.attrs.value as HostTensor | undefined)?.data : undefined;
}

/** The value of scalar constant `v` (a Constant node's), or `undefined`. */
function scalarOf(graph: Graph, v: number): number | undefined {
  const data = constantData(graph, v);
  return data?.length === 1 ? Number(data[0]) : undefined;
}

/**
 * Integer weights as i8, or `undefined` where one falls outside -128..127. Through a native
 * conversion and one typed loop: an `Array.from` of ResNet-50's weights took 2 s of its compile.
 */
function int8Of(data: HostTensor["data"]): Int8Array | undefined {
  if (typeof data[0] === "bigint") return undefined;
  const source = data as ArrayLike<number> & Iterable<number>;
  const bytes = new Int8Array(source);
  for (let i = 0; i < bytes.length; i++) if (bytes[i] !== source[i]) return undefined;
  return bytes;
}

/** `sums` times `factor`, as a constant of their shape. */
function scaled(sums: HostTensor, factor: number): HostTensor {
  return { ...sums, data: handOver(Int32Array.from(sums.data as Int32Array, (s) => s * factor)) };
}

/**
 * The sums of weight `w` along K: a matmul's [K, N] by column ([N]), a convolution's
 * [M, C, ...] by output channel ([M, 1, 1], as its output's channel axis broadcasts).
 */
function columnSums(w: Int8Array, shape: readonly number[], conv: boolean): HostTensor {
  const [rows, cols] = conv ? [shape[0], sizeOf(shape.slice(1))] : [shape[0], shape[1]];
  const outputs = conv ? rows : cols, sums = new Int32Array(outputs);
  for (let r = 0; r < rows; r++) {
    for (let c = 0; c < cols; c++) sums[conv ? r : c] += w[r * cols + c];
  }
  const out = conv ? [rows, ...shape.slice(2).map(() => 1)] : [cols];
  return { data: sums, shape: out, dtype: "i32" };
}

/** `graph` without the nodes no output reads (the shifted activations the products left). */
export function withoutUnread(graph: Graph): Graph {
  const live = new Set(graph.outputs.map((o) => o.value));
  const kept = new Set<number>();
  for (const n of [...graph.nodes].reverse()) {
    if (!n.outputs.some((v) => live.has(v))) continue;
    kept.add(n.id);
    n.inputs.forEach((v) => live.add(v));
  }
  const nodes = graph.nodes.filter((n) => kept.has(n.id)).map((n) => nodeSpecOf(graph, n));
  const boundary = boundaryOf(graph);
  return Graph.create({ ...boundary, nodes });
}
