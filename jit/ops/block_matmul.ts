/**
 * Block-quantized weights, read packed: `BlockDequantize` unpacks `bits`-bit unsigned values
 * (2, 4 or 8, lowest bits first) held in u32 words along a tensor's last axis in blocks of
 * `block`, each block less its zero point and times its scale; `BlockMatMul` is A times such a
 * weight of N rows of K (ONNX Runtime's MatMulNBits: B [N, K] quantized along K),
 * A [..., M, K] → [..., M, N].
 *
 * `QuantizeRowBlocks` rounds A to 8 bits a block before such a product, as ONNX Runtime's CPU
 * computes MatMulNBits of `accuracy_level` 4 (MLAS's CompInt8): per block of `block` along the
 * last axis, scale = max |a| / 127 and a → round(a · (127 / max |a|)) · scale (0 where the
 * block is all zeros). A BlockMatMul after it says so (`int8`): its A then holds whole numbers
 * times a scale per block, which a generator may sum in integers.
 *
 * `PackRowBlocks` rounds A so and packs the integers as bytes, four to a word, with each block's
 * scale beside them; a BlockMatMul of `packed` A reads those (a GPU's byte dot products take the
 * words as they lie, where A rounded as f32 had to be packed again by every workgroup). A
 * BlockMatMul that `rounds` takes A as it is and rounds it so itself (QuantizeRowBlocks, then the
 * `int8` product): a GPU kernel packing its own chunks of A rounds them where it packs them, and
 * the kernel that would have stored A is not run.
 *
 * They decompose into graph ops over the words (u32 division and remainder by powers of two),
 * so every backend runs them; a backend whose generator unpacks in registers
 * (`DeviceProfile.blockProducts`) runs a BlockMatMul of few rows as one kernel that reads each
 * packed word once (fusion asks {@linkcode nativeBlockMatMul}).
 *
 * @module
 */
import {
  type Attrs,
  defineOps,
  type EmitRef,
  type Emitter,
  type InferContext,
  type OpDef,
} from "./registry.ts";

/** Bits a packed value may have. */
const BITS = [2, 4, 8];

/**
 * The validated `bits` and `block` of a block-quantized op, with the 32-bit words of one block
 * (the packed values are held four bytes to a u32 word, little-endian, as they lie in memory: the
 * generated backends store every element in 32 bits, so a byte to an element took four times the
 * memory and bandwidth).
 */
function blockForm(ctx: InferContext): { bits: number; block: number; words: number } {
  const bits = ctx.int("bits", 4), block = ctx.int("block", 32);
  if (!BITS.includes(bits) || block < 16 || (block & (block - 1)) !== 0) {
    ctx.fail(
      `${bits} bits in blocks of ${block}`,
      "give bits 2, 4 or 8 and a block of a power of two from 16",
      "bad-attribute",
    );
  }
  return { bits, block, words: (block * bits) / 32 };
}

/** Checks the packed words [..., blocks · words], scales and zero points [..., blocks]. */
function checkPacked(ctx: InferContext, first: number, words: number): number {
  ctx.requireDType(first, ["u32"]);
  ctx.requireDType(first + 1, ["f32"]);
  const shape = ctx.input(first).shape, blocks = (shape.at(-1) ?? 0) / words;
  const perBlock = [...shape.slice(0, -1), blocks];
  const [scales, zeros] = ctx.inputs.slice(first + 1);
  if (
    !Number.isInteger(blocks) || blocks < 1 || scales.dtype !== "f32" ||
    (zeros && zeros.dtype !== "f32" && zeros.dtype !== "u8") ||
    [scales, zeros].some((t) => t && t.shape.join() !== perBlock.join())
  ) {
    ctx.fail(
      `packed words [${shape}] in blocks of ${words} words`,
      `give whole blocks of u32 words, f32 scales and f32 or u8 zero points of shape [${perBlock}]`,
      "shape-mismatch",
    );
  }
  return blocks;
}

/**
 * Packed words [..., L] as their values [..., L, 32 / bits] in f32, lowest bits first: value s of
 * word w is ⌊w / 2^(s·bits)⌋ mod 2^bits, in exact u32 arithmetic.
 */
function unpack(e: Emitter, words: EmitRef, bits: number): EmitRef {
  const per = 32 / bits, shape = e.typeOf(words).shape;
  const spread = e.op("Expand", [e.op("Unsqueeze", [words], { axes: [shape.length] })], {
    shape: [...shape, per],
  });
  const shifts = e.op("Constant", [], {
    value: {
      data: Uint32Array.from({ length: per }, (_, s) => 2 ** (s * bits)),
      shape: [per],
      dtype: "u32",
    },
  });
  const values = e.op("Mod", [e.op("Div", [spread, shifts]), e.scalar(2 ** bits, "u32")]);
  return e.op("Cast", [values], { to: "f32" });
}

/**
 * Zero points [..., blocks, 1] as the values of `shape` subtract them: f32 as they are, u8 (whole
 * values, a quarter of the bytes where a backend holds them packed) spread over the block first
 * and then cast, so that the cast stays where each value reads its zero point (cast first, a
 * broadcast computed value, fusion stored it as an f32 table of its own).
 */
function zeroPoints(e: Emitter, zeros: EmitRef, shape: readonly number[]): EmitRef {
  if (e.typeOf(zeros).dtype === "f32") return zeros;
  return e.op("Cast", [e.op("Expand", [zeros], { shape: [...shape] })], { to: "f32" });
}

/** BlockDequantize's decomposition: [..., blocks · words] → [..., blocks · block]. */
function dequantize(e: Emitter, [words, scales, zeros]: readonly EmitRef[], bits: number): EmitRef {
  const shape = e.typeOf(words).shape, lead = shape.slice(0, -1);
  const blocks = e.typeOf(scales).shape.at(-1)!, size = (shape.at(-1)! / blocks) * (32 / bits);
  const grouped = e.op("Reshape", [words], { shape: [...lead, blocks, shape.at(-1)! / blocks] });
  const values = e.op("Reshape", [unpack(e, grouped, bits)], { shape: [...lead, blocks, size] });
  const perBlock = (t: EmitRef) => e.op("Unsqueeze", [t], { axes: [lead.length + 1] });
  const middle = e.scalar(2 ** (bits - 1), "f32");
  const zero = zeros ? zeroPoints(e, perBlock(zeros), e.typeOf(values).shape) : middle;
  const w = e.op("Mul", [e.op("Sub", [values, zero]), perBlock(scales)]);
  return e.op("Reshape", [w], { shape: [...lead, blocks * size] });
}

/**
 * BlockMatMul's weight as `a`'s product takes it: dequantized, cut to K, transposed to [K, N] and
 * cast to `a`'s dtype (the decomposition's second MatMul operand); its one output.
 */
export function blockWeight(e: Emitter, ins: readonly EmitRef[], attrs: Attrs): EmitRef[] {
  return [weightOf(e, ins, attrs)];
}

/**
 * A BlockMatMul's A packed by PackRowBlocks (`ins`: its words and scales) as the product reads it:
 * the f32 values unpacked (the decomposition's first MatMul operand); its one output.
 */
export function packedOperand(e: Emitter, ins: readonly EmitRef[]): EmitRef[] {
  return [unpackRows(e, ins[0], ins[1])];
}

function weightOf(e: Emitter, [a, ...packed]: readonly EmitRef[], attrs: Attrs): EmitRef {
  const k = e.typeOf(a).shape.at(-1)!, dtype = e.typeOf(a).dtype;
  const rows = e.op("BlockDequantize", packed, { bits: attrs.bits, block: attrs.block });
  const width = e.typeOf(rows).shape[1];
  const cut = width === k ? rows : e.op("Slice", [rows], { starts: [0], ends: [k], axes: [1] });
  const w = e.op("Transpose", [cut], { perm: [1, 0] });
  return dtype === "f32" ? w : e.op("Cast", [w], { to: dtype });
}

/**
 * A block's scale (its `largest` magnitude over 127) and the factor its values are rounded by:
 * 127 / max |a|, as MLAS multiplies (a division, or 1 / scale, rounds differently: a value near a
 * half then rounds the other way, and a 24-layer decoder's ids drift); 0 for a block of zeros.
 */
function blockScale(e: Emitter, largest: EmitRef): { scale: EmitRef; inverse: EmitRef } {
  const scale = e.op("Div", [largest, e.scalar(127, "f32")]);
  const zero = e.op("Equal", [scale, e.scalar(0, "f32")]);
  const quotient = e.op("Div", [e.scalar(127, "f32"), largest]);
  return { scale, inverse: e.op("Where", [zero, e.scalar(0, "f32"), quotient]) };
}

/** QuantizeRowBlocks' decomposition: A [..., K] rounded to 8 bits per block, as f32. */
function quantizeRows(e: Emitter, a: EmitRef, block: number): EmitRef {
  const shape = e.typeOf(a).shape, lead = shape.slice(0, -1), k = shape.at(-1)!;
  const blocks = Math.ceil(k / block), width = blocks * block, axis = lead.length;
  // The last block cut short is filled with zeros, which leave its largest magnitude as it is.
  const padded = width === k
    ? a
    : e.op("Pad", [a], { pads: [0, width - k], axes: [axis], mode: "constant", value: 0 });
  const grouped = e.op("Reshape", [padded], { shape: [...lead, blocks, block] });
  const largest = e.op("ReduceMax", [e.op("Abs", [grouped])], { axes: [axis + 1], keepdims: 1 });
  const { scale, inverse } = blockScale(e, largest);
  const q = e.op("Round", [e.op("Mul", [grouped, inverse])]);
  const rows = e.op("Reshape", [e.op("Mul", [q, scale])], { shape: [...lead, width] });
  return width === k ? rows : e.op("Slice", [rows], { starts: [0], ends: [k], axes: [axis] });
}

/** Each byte's place value in a u32 word, lowest first. */
const PLACES = [1, 256, 65536, 16777216];

/**
 * PackRowBlocks' decomposition: A [..., K] rounded to 8 bits a block as QuantizeRowBlocks rounds
 * it, the integers as signed bytes four to a u32 word [..., K / 4] and each block's scale
 * [..., K / block]. Within each 32 values, word t (t < 4) holds values 8t, 8t + 2, 8t + 4, 8t + 6
 * and word 4 + t the odd ones after them: the order of a 4-bit weight word's low and high
 * nibbles, so that a byte dot product takes a word of each as they lie. One reduction (the
 * block's largest magnitude, over its words, each word's four values read at once) and two
 * outputs, words and scales: fusion makes it one kernel, as QuantizeRowBlocks'.
 */
function packRows(e: Emitter, a: EmitRef, block: number): EmitRef[] {
  const shape = e.typeOf(a).shape, lead = shape.slice(0, -1), k = shape.at(-1)!;
  const blocks = k / block, words = block / 4, axis = lead.length;
  // Value 32g + 8t + 2i + p of a block at [g, t, i, p]; its word at [g, p, t], byte i.
  const split = e.op("Reshape", [a], { shape: [...lead, blocks, block / 32, 4, 4, 2] });
  const perm = [...lead.keys(), axis, axis + 1, axis + 4, axis + 2, axis + 3];
  const grouped = e.op("Reshape", [e.op("Transpose", [split], { perm })], {
    shape: [...lead, blocks, words, 4],
  });
  const bytes = [0, 1, 2, 3].map((i) => {
    const slice = e.op("Slice", [grouped], { starts: [i], ends: [i + 1], axes: [axis + 2] });
    return e.op("Squeeze", [slice], { axes: [axis + 2] });
  });
  const abs = bytes.map((v) => e.op("Abs", [v]));
  const most = e.op("Max", [e.op("Max", [abs[0], abs[1]]), e.op("Max", [abs[2], abs[3]])]);
  const largest = e.op("ReduceMax", [most], { axes: [axis + 1], keepdims: 1 });
  const { scale, inverse } = blockScale(e, largest);
  const placed = bytes.map((v, i) => {
    const q = e.op("Round", [e.op("Mul", [v, inverse])]);
    // A negative integer's byte is its two's complement: q + 256.
    const negative = e.op("Less", [q, e.scalar(0, "f32")]);
    const byte = e.op("Where", [negative, e.op("Add", [q, e.scalar(256, "f32")]), q]);
    return e.op("Mul", [e.op("Cast", [byte], { to: "u32" }), e.scalar(PLACES[i], "u32")]);
  });
  const low = e.op("Add", [placed[0], placed[1]]), high = e.op("Add", [placed[2], placed[3]]);
  return [
    e.op("Reshape", [e.op("Add", [low, high])], { shape: [...lead, k / 4] }),
    e.op("Reshape", [scale], { shape: [...lead, blocks] }),
  ];
}

/**
 * A packed by PackRowBlocks (`words` [..., K / 4], `scales` [..., blocks]) as the f32 values
 * QuantizeRowBlocks gives: each signed byte times its block's scale, in A's own order.
 */
function unpackRows(e: Emitter, words: EmitRef, scales: EmitRef): EmitRef {
  const shape = e.typeOf(words).shape, lead = shape.slice(0, -1), k = shape.at(-1)! * 4;
  const blocks = e.typeOf(scales).shape.at(-1)!, block = k / blocks, axis = lead.length;
  // The words' bytes as unsigned values [..., K / 4, 4], lowest first, made signed.
  const byte = unpack(e, words, 8);
  const high = e.op("Less", [byte, e.scalar(128, "f32")]);
  const q = e.op("Where", [high, byte, e.op("Sub", [byte, e.scalar(256, "f32")])]);
  // Byte i of word [g, p, t] back to value 32g + 8t + 2i + p.
  const split = e.op("Reshape", [q], { shape: [...lead, blocks, block / 32, 2, 4, 4] });
  const perm = [...lead.keys(), axis, axis + 1, axis + 3, axis + 4, axis + 2];
  const values = e.op("Reshape", [e.op("Transpose", [split], { perm })], {
    shape: [...lead, blocks, block],
  });
  const scaled = e.op("Mul", [values, e.op("Unsqueeze", [scales], { axes: [axis + 1] })]);
  return e.op("Reshape", [scaled], { shape: [...lead, k] });
}

/**
 * Whether fusion should build a BlockMatMul with A of `rows` rows (batch · M) as one kernel
 * where the generator unpacks in registers: a product of few rows reads each weight word once
 * for every row; more rows are faster through the tiled matmul of the weight unpacked once.
 */
export function nativeBlockMatMul(rows: number): boolean {
  return rows <= 4;
}

const blockOps: OpDef[] = [{
  name: "BlockDequantize",
  category: "composite",
  arity: [2, 3],
  primitive: false,
  infer: (ctx) => {
    const { block, words } = blockForm(ctx);
    const blocks = checkPacked(ctx, 0, words), shape = ctx.input(0).shape;
    return [{ shape: [...shape.slice(0, -1), blocks * block], dtype: "f32" }];
  },
  decompose: (e, ins, attrs) => [dequantize(e, ins, attrs.bits as number)],
}, {
  name: "BlockMatMul",
  category: "matmul",
  arity: [3, 5],
  primitive: false,
  infer: (ctx) => {
    // `packed`: A as PackRowBlocks gives it, its words and scales (inputs 0 and 1).
    const packedA = ctx.int("packed", 0) === 1, first = packedA ? 2 : 1;
    const rounds = ctx.int("rounds", 0) === 1, int8 = ctx.int("int8", 0) === 1;
    ctx.requireDType(0, packedA ? ["u32"] : rounds ? ["f32"] : ["f32", "f16"]);
    if (rounds && (packedA || !int8)) {
      ctx.fail(
        "rounds with packed A or without int8",
        "give rounds: 1 with int8: 1",
        "bad-attribute",
      );
    }
    const { block, words } = blockForm(ctx);
    const blocks = checkPacked(ctx, first, words), a = ctx.input(0).shape;
    const w = ctx.input(first).shape, k = (a.at(-1) ?? 0) * (packedA ? 4 : 1);
    const scales = packedA ? ctx.input(1).shape : [];
    if (
      w.length !== 2 || a.length < 1 || k > blocks * block || k <= (blocks - 1) * block ||
      ctx.inputs.length > first + 3 ||
      (packedA && (k % block !== 0 || scales.join() !== [...a.slice(0, -1), k / block].join()))
    ) {
      ctx.fail(
        `A [${a}] times ${blocks} blocks of ${block} a row`,
        "give B as [N, blocks · words] and A a last axis K with ⌈K / block⌉ blocks (packed: " +
          "K / 4 words and a scale a block)",
        "shape-mismatch",
      );
    }
    return [{ shape: [...a.slice(0, -1), w[0]], dtype: packedA ? "f32" : ctx.input(0).dtype }];
  },
  decompose: (e, ins, attrs) => {
    const a = attrs.packed
      ? unpackRows(e, ins[0], ins[1])
      : attrs.rounds
      ? quantizeRows(e, ins[0], attrs.block as number)
      : ins[0];
    const tables = ins.slice(attrs.packed ? 2 : 1);
    return [e.op("MatMul", [a, weightOf(e, [a, ...tables], attrs)])];
  },
}, {
  name: "PackRowBlocks",
  category: "composite",
  arity: [1, 1],
  primitive: false,
  infer: (ctx) => {
    ctx.requireDType(0, ["f32"]);
    const block = ctx.int("block", 32), shape = ctx.input(0).shape, k = shape.at(-1) ?? 0;
    if (block < 32 || block % 32 !== 0 || k < block || k % block !== 0) {
      ctx.fail(
        `A's last axis ${k} in blocks of ${block}`,
        "give blocks of a multiple of 32 that divide A's last axis",
        "bad-attribute",
      );
    }
    const lead = shape.slice(0, -1);
    return [{ shape: [...lead, k / 4], dtype: "u32" }, {
      shape: [...lead, k / block],
      dtype: "f32",
    }];
  },
  decompose: (e, [a], attrs) => packRows(e, a, attrs.block as number),
}, {
  name: "QuantizeRowBlocks",
  category: "composite",
  arity: [1, 1],
  primitive: false,
  infer: (ctx) => {
    ctx.requireDType(0, ["f32"]);
    const block = ctx.int("block", 32);
    if (block < 1) ctx.fail(`blocks of ${block}`, "give a block of 1 or more", "bad-attribute");
    return [ctx.input(0)];
  },
  decompose: (e, [a], attrs) => [quantizeRows(e, a, attrs.block as number)],
}];

defineOps(blockOps);
