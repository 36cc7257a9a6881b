/**
 * The quantized ops of ONNX Runtime's `com.microsoft` domain onto kiln's: the QOperator format's
 * (`quantize_static(…, quant_format=QuantFormat.QOperator)`) QGemm, QLinearAdd, QLinearMul,
 * QLinearSigmoid, QLinearLeakyRelu, QLinearGlobalAveragePool, QLinearConcat and QLinearSoftmax
 * (`jit/ops/qoperator.ts`: the zero points given flagged); and MatMulNBits and
 * GatherBlockQuantized, the block-quantized weights and embedding tables (2 to 8 bits) of ONNX
 * Runtime's int4 language models and transformers.js's `q4` exports, whose packed bytes are laid
 * out here as the tables kiln's BlockMatMul and BlockDequantize read.
 *
 * @module
 */
import { KilnError } from "../../jit/support/errors.ts";
import { sizeOf } from "../../jit/ir/shape.ts";
import type { HostTensor } from "../../jit/ir/host_tensor.ts";
import type { TensorData } from "../../jit/ir/dtype.ts";
import { handOver } from "../../jit/ir/hand_over.ts";
import type { Attrs } from "../../jit/ops/mod.ts";
import {
  attrs,
  constant,
  constInput,
  type Converter,
  type Known,
  type NodeContext,
  opOf,
  typeOf,
  valuesOf,
} from "../import/node_context.ts";
import { littleEndianWords } from "../wire/proto.ts";

/** ONNX Runtime's contrib-op domain. */
export const MS_DOMAIN = "com.microsoft";

/**
 * A QOperator op (kiln's, `jit/ops/qoperator.ts`) of quantized operands at input positions
 * `operands` (each followed by its scale and zero point) and y's scale at `output`: the zero
 * points given, flagged.
 */
function quantized(
  name: string,
  operands: readonly number[],
  output: number,
  attrsOf: (c: NodeContext) => Attrs = () => ({}),
): Converter<Known> {
  return (c) => {
    const ins: Known[] = [], zeros: number[] = [];
    for (const i of [...operands, output]) {
      const zero = c.input(i + (i === output ? 1 : 2));
      ins.push(...(i === output ? [c.required(i)] : [c.required(i), c.required(i + 1)]));
      if (zero) ins.push(zero);
      zeros.push(+!!zero);
    }
    return c.emit(name, ins, { ...attrsOf(c), zeros });
  };
}

/** QGemm (kiln's op): its optional inputs flagged. */
function qGemm(c: NodeContext): Known[] {
  const a = attrs(c), [xz, wz, bias, ys, yz] = [2, 5, 6, 7, 8].map((i) => c.input(i));
  const ins = [c.required(0), c.required(1), xz, c.required(3), c.required(4), wz, bias, ys, yz];
  return c.emit("QGemm", ins.filter((k) => k !== undefined), {
    transA: a.int("transA", 0),
    transB: a.int("transB", 0),
    alpha: a.float("alpha", 1),
    a_zero: +!!xz,
    b_zero: +!!wz,
    bias: +!!bias,
    y_scale: +!!ys,
    y_zero: +!!(ys && yz),
  });
}

/** The `bits`-bit unsigned value at bit `at` of `bytes`, low bits first (it may cross a byte). */
function unpack(bytes: ArrayLike<number>, at: number, bits: number): number {
  const i = at >> 3, word = bytes[i] | ((bytes[i + 1] ?? 0) << 8);
  return (word >> (at & 7)) & ((1 << bits) - 1);
}

/**
 * MatMulNBits: A times Bᵀ, B of [N, K] stored as `bits`-bit unsigned values in blocks of
 * `block_size` along K (each block its scale and zero point; without zero points the middle
 * value, 2^(bits−1)). B, its scales and zero points are the model's weights: one of 2, 4 or 8
 * bits stays packed (a `BlockMatMul`) where its blocks are whole vec4s of words or it is large
 * (see `PACKED_FROM`); any other is dequantized once, at import, into a [K, N] constant of a
 * MatMul. A bias is added after. With `accuracy_level` 4 and 4-bit weights A is first rounded to
 * 8 bits a block (`QuantizeRowBlocks`), as ONNX Runtime's CPU computes it, and the product may
 * sum in integers.
 */
function matMulNBits(c: NodeContext): Known[] {
  const op = opOf(c), a = attrs(c), x = c.required(0);
  const k = a.int("K"), n = a.int("N"), bits = a.int("bits", 4)!, block = a.int("block_size");
  const level = a.int("accuracy_level", 0);
  if (!k || !n || !block || bits < 2 || bits > 8 || block < 16 || (block & (block - 1)) !== 0) {
    throw new KilnError(
      `${c.label}: MatMulNBits with K ${k}, N ${n}, ${bits} bits, blocks of ${block}`,
      {
        code: "bad-attribute",
        fix: "MatMulNBits takes K, N, bits 2 to 8 and a block_size of a power of two from 16",
      },
    );
  }
  if (c.input(4)) {
    throw new KilnError(`${c.label}: MatMulNBits with g_idx (act-order)`, {
      code: "unsupported",
      fix: "re-quantize without act-order (desc_act / g_idx)",
    });
  }
  const blocks = Math.ceil(k / block), blob = (block * bits) / 8;
  const q = constInput(c, 1, "B").tensor;
  const scales = constInput(c, 2, "scales").tensor;
  const zeroInput = c.input(3) ? constInput(c, 3, "zero_points").tensor : undefined;
  const packed = zeroInput?.dtype === "u8";
  const zeroStride = Math.ceil((blocks * bits) / 8);
  const count = (t: { shape: readonly number[] }) => sizeOf(t.shape);
  if (
    count(q) !== n * blocks * blob || count(scales) !== n * blocks ||
    (zeroInput && count(zeroInput) !== (packed ? n * zeroStride : n * blocks)) ||
    typeOf(x).shape.at(-1) !== k
  ) {
    throw new KilnError(
      `${c.label}: MatMulNBits of A [${typeOf(x).shape}] with ${count(q)} bytes of B, ${
        count(scales)
      } scales`,
      {
        code: "shape-mismatch",
        fix: `give A a last axis of K = ${k}, B [${n}, ${blocks}, ${blob}] and ${
          n * blocks
        } scales`,
      },
    );
  }
  const dtype = typeOf(x).dtype;
  const int8 = level === 4 && bits === 4 && dtype === "f32";
  const rows = int8 ? op("QuantizeRowBlocks", [x], { block }) : x;
  // Blocks of whole vec4s of words are read packed by the generators' block kernels, however
  // small the weight: a decode step reads a quarter of the bytes of its f32 form (fused QKV of
  // a 0.5B decoder, [896, 1152], is 4.1 MB in f32 against 0.77 MB packed with its tables).
  const vectors = ((block * bits) / 32) % 4 === 0;
  const wide = bits !== 2 && bits !== 4 && bits !== 8 || (!vectors && k * n <= PACKED_FROM);
  const weight = wide
    ? expandedWeight(q, scales, zeroInput, { k, n, bits, block, packed })
    : undefined;
  let y = weight
    ? op("MatMul", [rows, dtype === "f32" ? weight : op("Cast", [weight], { to: dtype })])
    : blockProduct(c, rows, { k, n, bits, block, packed: zeroInput !== undefined && packed, int8 });
  const bias = c.input(5);
  if (bias) y = op("Add", [y, bias]);
  return [y];
}

/** What dequantizing a MatMulNBits weight needs to know. */
interface NBits {
  readonly k: number;
  readonly n: number;
  readonly bits: number;
  readonly block: number;
  /** Whether the zero points are packed `bits` to a value, as B is. */
  readonly packed: boolean;
}

/**
 * Weights of more elements than this stay packed in the model, dequantized by the graph as it
 * reads them (kiln folds no constant expression of more than 2^20 elements at import): a model's
 * memory is then its packed bytes. Expanded at import, a Qwen2.5-0.5B-shaped 4-bit decoder's
 * buffers needed 4.3 GiB, past wasm's 4 GiB.
 */
const PACKED_FROM = 1 << 20;

/**
 * MatMulNBits' weight dequantized at import: a [K, N] f32 array, from typed arrays (a
 * Qwen2.5-0.5B-shaped decoder's small projections, read through JavaScript arrays of their
 * values, took 960 ms).
 */
function unpackedWeights(
  q: ArrayLike<number>,
  scales: ArrayLike<number>,
  zeros: ArrayLike<number> | undefined,
  { k, n, bits, block }: NBits,
): Float32Array {
  const blocks = Math.ceil(k / block), blob = (block * bits) / 8, w = new Float32Array(k * n);
  for (let col = 0; col < n; col++) {
    for (let b = 0; b < blocks; b++) {
      const scale = scales[col * blocks + b], zero = zeroAt(zeros, col * blocks + b, bits);
      const from = (col * blocks + b) * blob * 8, last = Math.min(block, k - b * block);
      for (let j = 0; j < last; j++) {
        w[(b * block + j) * n + col] = (unpack(q, from + j * bits, bits) - zero) * scale;
      }
    }
  }
  return w;
}

/** Block `i`'s zero point: from the table, or the middle value where the model has none. */
function zeroAt(zeros: ArrayLike<number> | undefined, i: number, bits: number): number {
  return zeros ? zeros[i] : 1 << (bits - 1);
}

/**
 * Zero points one per block (`rows` of `blocks`): the model's u8 bytes, packed `bits` to a value
 * in rows of `zeroStride` bytes, as u8 (whole values: a quarter of an f32 table's bytes where a
 * backend holds them packed; a 0.5B decoder's vocabulary product read 17 MB of f32 zero points a
 * token, 4 of u8); where `zeroStride` is undefined, the model's float zero points as f32.
 */
function zeroValues(
  zeros: HostTensor,
  { blocks, bits, zeroStride }: Pick<BlockForm, "blocks" | "bits" | "zeroStride">,
): Uint8Array | Float32Array {
  if (zeroStride === undefined) return Float32Array.from(valuesOf(zeros));
  const bytes = zeros.data as Uint8Array, rows = bytes.length / zeroStride;
  const out = new Uint8Array(rows * blocks);
  for (let r = 0; r < rows; r++) {
    for (let b = 0; b < blocks; b++) {
      out[r * blocks + b] = unpack(bytes, r * zeroStride * 8 + b * bits, bits);
    }
  }
  return out;
}

/**
 * MatMulNBits' small weight dequantized at import, [K, N] f32, made once for its packed values,
 * scales and zero points (see `madeFrom`: a generation's prefill and step share it, and so does
 * the device's upload).
 */
function expandedWeight(
  q: HostTensor,
  scales: HostTensor,
  zeros: HostTensor | undefined,
  nb: NBits,
): Known {
  const form = `expanded ${Object.values(nb)} ${idOf(scales.data)} ${
    zeros ? idOf(zeros.data) : "-"
  }`;
  const data = madeFrom(q.data, form, () => {
    const blocks = Math.ceil(nb.k / nb.block);
    const zeroStride = nb.packed ? Math.ceil((blocks * nb.bits) / 8) : undefined;
    const table = zeros && zeroValues(zeros, { blocks, bits: nb.bits, zeroStride });
    return unpackedWeights(q.data as Uint8Array, floats(scales), table, nb);
  });
  return { kind: "const", tensor: { data, shape: [nb.k, nb.n], dtype: "f32" }, i64: false };
}

/** A number for each object asked about, the same every time it is asked. */
const ids = new WeakMap<object, number>();
let lastId = 0;

function idOf(o: object): number {
  let id = ids.get(o);
  if (id === undefined) ids.set(o, id = ++lastId);
  return id;
}

/** A tensor's values: f32 data as it is (`valuesOf` makes a JavaScript array). */
function floats(t: HostTensor): ArrayLike<number> {
  return t.dtype === "f32" ? t.data as Float32Array : valuesOf(t);
}

/**
 * The packed tables of a block-quantized op as kiln's block ops take them, rows read by `rowsOf`
 * (held, not folded: unpacked at import they would take more than the bytes): the bytes as u32
 * words [..., blocks · words] (see {@linkcode wordsOf}), f32 scales and, where the model has
 * them, zero points [..., blocks] (see {@linkcode zeroTable}).
 */
function packedTables(
  c: NodeContext,
  rowsOf: (t: Known, shape: number[]) => Known,
  { data, blocks, block, bits, zeroStride }: BlockForm,
): Known[] {
  const words = rowsOf(c.held(wordsOf(c, data)), [(blocks * block * bits) / 32]);
  const scales = constInput(c, 2, "scales").tensor;
  const scale = scales.dtype === "f32"
    ? c.required(2)
    : constant(valuesOf(scales), [...scales.shape], "f32");
  const tables = [scale, ...(c.input(3) ? [zeroTable(c, { blocks, bits, zeroStride })] : [])];
  return [words, ...tables.map((t) => rowsOf(c.held(t), [blocks]))];
}

/**
 * Input `i`'s bytes four to a u32 word, little-endian (the generated backends hold an element in
 * 32 bits: a byte each would take four times the memory and bandwidth).
 */
function wordsOf(c: NodeContext, i: number): Known {
  const bytes = constInput(c, i, "packed values").tensor.data as Uint8Array;
  const words = madeFrom(bytes, "words", () => littleEndianWords(bytes, bytes.length / 4));
  return tableOf(words, "u32");
}

/** Tables made at import from a weight's data, by that data and the table's form. */
const made = new WeakMap<object, Map<string, TensorData>>();

/**
 * The table `make` makes from `source` in `form`, made once: an initializer is decoded once for
 * every import of its model (`initializerOf`), so a model imported again (a generation's step
 * model) gets the same tables, and the device uploads them once.
 */
function madeFrom(source: object, form: string, make: () => TensorData): TensorData {
  const tables = made.get(source) ?? new Map<string, TensorData>();
  made.set(source, tables);
  let table = tables.get(form);
  if (!table) tables.set(form, table = handOver(make()));
  return table;
}

/** A made table as a constant of the import (1-D, `dtype`). */
function tableOf(data: TensorData, dtype: "u32" | "u8" | "f32"): Known {
  return { kind: "const", tensor: { data, shape: [data.length], dtype }, i64: false };
}

/**
 * The zero points (input 3), one per block (u8, or f32 where the model's are floats; see
 * {@linkcode zeroValues}), rows of `blocks`, made at import: a table of
 * one value a block is 1/`block` of the values'. Unpacked or cast by graph ops, each product's
 * zero points were computed again in every run, by kernels of their own; as a plain table they
 * are read where the values are.
 */
function zeroTable(
  c: NodeContext,
  { blocks, bits, zeroStride }: Pick<BlockForm, "blocks" | "bits" | "zeroStride">,
): Known {
  const zeros = constInput(c, 3, "zero_points").tensor;
  const table = madeFrom(
    zeros.data,
    `zeros ${blocks} ${bits} ${zeroStride}`,
    () => zeroValues(zeros, { blocks, bits, zeroStride }),
  );
  return tableOf(table, table instanceof Uint8Array ? "u8" : "f32");
}

/** Where block-quantized values are (their input) and how they are packed. */
interface BlockForm {
  /** Input of the packed values (both ops take scales as input 2, zero points as input 3). */
  readonly data: 0 | 1;
  readonly blocks: number;
  readonly block: number;
  readonly bits: number;
  /** Bytes of packed zero points a row; `undefined` where they are floats, one a block. */
  readonly zeroStride?: number;
}

/**
 * MatMulNBits with its weight packed (bits 2, 4 or 8, whole values to a byte): kiln's
 * BlockMatMul over the bytes [N, blocks · bytes] and the tables [N, blocks].
 */
function blockProduct(
  c: NodeContext,
  a: Known,
  { k, n, bits, block, packed, int8 }: NBits & { int8: boolean },
): Known {
  const blocks = Math.ceil(k / block);
  const rowsOf = (t: Known, shape: number[]) => opOf(c)("Reshape", [t], { shape: [n, ...shape] });
  const zeroStride = packed ? Math.ceil((blocks * bits) / 8) : undefined;
  const tables = packedTables(c, rowsOf, { data: 1, blocks, block, bits, zeroStride });
  return opOf(c)("BlockMatMul", [a, ...tables], { bits, block, ...(int8 ? { int8: 1 } : {}) });
}

/**
 * GatherBlockQuantized (uint8 data, gathered along axis 0, quantized in blocks along the last
 * axis, `bits` 2, 4 or 8 packed low bits first): the table, its scales and zero points are the
 * model's weights, dequantized once at import; the op is then a Gather.
 */
function gatherBlockQuantized(c: NodeContext): Known[] {
  const op = opOf(c), a = attrs(c), indices = c.required(1);
  const table = constInput(c, 0, "data").tensor, scaleInput = constInput(c, 2, "scales").tensor;
  const bits = a.int("bits", 4)!, block = a.int("block_size", 128)!, shape = table.shape;
  const rank = shape.length, quantized = a.int("quantize_axis", rank - 1)!;
  const width = ((shape[rank - 1] ?? 0) * 8) / bits, blocks = Math.ceil(width / block);
  const rows = shape.slice(0, -1).reduce((p, d) => p * d, 1), per = 8 / bits;
  const zeroInput = c.input(3) ? constInput(c, 3, "zero_points").tensor : undefined;
  if (
    table.dtype !== "u8" || ![2, 4, 8].includes(bits) || a.int("gather_axis", 0) !== 0 ||
    (quantized !== rank - 1 && quantized !== -1) || block < 16 || (block & (block - 1)) !== 0 ||
    scaleInput.data.length !== rows * blocks ||
    (zeroInput && zeroInput.data.length !== rows * Math.ceil(blocks / per))
  ) {
    throw new KilnError(
      `${c.label}: GatherBlockQuantized of ${table.dtype} [${shape}] with ${bits} bits, blocks of ${block}`,
      {
        code: "unsupported",
        fix: "kiln takes uint8 data of 2, 4 or 8 bits gathered along axis 0 and quantized in " +
          "blocks of a power of two from 16 along its last axis, a scale per block",
      },
    );
  }
  const zeroStride = Math.ceil(blocks / per);
  if (rank === 2 && width % block === 0 && rows * width > PACKED_FROM) {
    const y = gatheredRows(c, { rows, blocks, block, bits, zeroStride });
    return [scaleInput.dtype === "f32" ? y : op("Cast", [y], { to: scaleInput.dtype })];
  }
  // The bytes as they are (a JavaScript array of a vocabulary's bytes took seconds and GBs).
  const q = table.data as Uint8Array, scales = floats(scaleInput);
  const zeros = zeroInput && zeroValues(zeroInput, { blocks, bits, zeroStride });
  const w = new Float32Array(rows * width);
  for (let r = 0; r < rows; r++) {
    for (let j = 0; j < width; j++) {
      const b = r * blocks + Math.floor(j / block);
      w[r * width + j] = (unpack(q, (r * width + j) * bits, bits) - zeroAt(zeros, b, bits)) *
        scales[b];
    }
  }
  const dequantized = constant(w, [...shape.slice(0, -1), width], "f32");
  const y = op("Gather", [dequantized, indices], { axis: 0 });
  return [scaleInput.dtype === "f32" ? y : op("Cast", [y], { to: scaleInput.dtype })];
}

/**
 * GatherBlockQuantized of a large table (a language model's embedding) as graph ops: the
 * indexed rows of the packed bytes, scales and zero points gathered, then unpacked, so only the
 * rows a run reads are dequantized. Dequantized at import, a Qwen2.5-0.5B-shaped vocabulary of
 * 151,936 × 896 took 545 MB as f32 constants where its packed bytes are 68 MB.
 */
function gatheredRows(
  c: NodeContext,
  { rows, blocks, block, bits, zeroStride }: {
    rows: number;
    blocks: number;
    block: number;
    bits: number;
    zeroStride: number;
  },
): Known {
  const op = opOf(c), indices = c.required(1);
  const rowsOf = (t: Known, shape: number[]) =>
    op("Gather", [op("Reshape", [t], { shape: [rows, ...shape] }), indices], { axis: 0 });
  const tables = packedTables(c, rowsOf, { data: 0, blocks, block, bits, zeroStride });
  return op("BlockDequantize", tables, { bits, block });
}

/** Converters by op type in {@linkcode MS_DOMAIN}. */
export const MS_QUANT_CONVERTERS: Record<string, Converter<Known>> = {
  QGemm: qGemm,
  QLinearAdd: quantized("QLinearAdd", [0, 3], 6),
  QLinearMul: quantized("QLinearMul", [0, 3], 6),
  QLinearSigmoid: quantized("QLinearSigmoid", [0], 3),
  QLinearLeakyRelu: quantized("QLinearLeakyRelu", [0], 3, (c) => ({
    alpha: attrs(c).float("alpha", 0.01),
  })),
  QLinearGlobalAveragePool: quantized("QLinearGlobalAveragePool", [0], 3, (c) => ({
    channels_last: attrs(c).int("channels_last", 0),
  })),
  QLinearConcat: (c) => {
    const count = c.inputs().length - 2;
    if (count < 3 || count % 3 !== 0) {
      throw new KilnError(
        `${c.label}: ${
          count + 2
        } inputs; QLinearConcat takes y's scale and zero point, then (x, scale, zero point) per input`,
        { code: "bad-input", fix: "re-quantize the model" },
      );
    }
    const operands = [...Array(count / 3).keys()].map((k) => 2 + 3 * k);
    return quantized("QLinearConcat", operands, 0, () => ({ axis: attrs(c).int("axis", 0) }))(c);
  },
  QLinearSoftmax: quantized("QLinearSoftmax", [0], 3, (c) => ({
    axis: attrs(c).int("axis", -1),
    opset: attrs(c).int("opset", 13),
  })),
  MatMulNBits: matMulNBits,
  GatherBlockQuantized: gatherBlockQuantized,
};
