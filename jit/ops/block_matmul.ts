/**
 * Block-quantized weights, read packed: `BlockDequantize` unpacks `bits`-bit unsigned values
 * (2, 4 or 8, lowest bits first, whole values to a byte) stored along a tensor's last axis in
 * blocks of `block`, each block less its zero point and times its scale; `BlockMatMul` is A
 * times such a weight of N rows of K (ONNX Runtime's MatMulNBits: B [N, K] quantized along K),
 * A [..., M, K] → [..., M, N].
 *
 * Both decompose into graph ops over the bytes (exact float arithmetic on them: WebAssembly has
 * no vector integer division), so every backend runs them; a backend whose generator unpacks in
 * registers (`DeviceProfile.blockProducts`) runs a BlockMatMul of few rows as one kernel that
 * reads each packed byte once (fusion asks {@linkcode nativeBlockMatMul}).
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

/** The validated `bits` and `block` of a block-quantized op, with the bytes of one block. */
function blockForm(ctx: InferContext): { bits: number; block: number; bytes: number } {
  const bits = ctx.int("bits", 4), block = ctx.int("block", 32);
  if (!BITS.includes(bits) || block < 16 || (block & (block - 1)) !== 0) {
    ctx.fail(
      `${bits} bits in blocks of ${block}`,
      "give bits 2, 4 or 8 and a block of a power of two from 16",
      "bad-attribute",
    );
  }
  return { bits, block, bytes: (block * bits) / 8 };
}

/** Checks the packed bytes [..., blocks · bytes], scales and zero points [..., blocks]. */
function checkPacked(ctx: InferContext, first: number, bytes: number): number {
  ctx.requireDType(first, ["u8"]);
  ctx.requireDType(first + 1, ["f32"]);
  const shape = ctx.input(first).shape, blocks = (shape.at(-1) ?? 0) / bytes;
  const perBlock = [...shape.slice(0, -1), blocks];
  const tables = ctx.inputs.slice(first + 1);
  if (
    !Number.isInteger(blocks) || blocks < 1 ||
    tables.some((t) => t.dtype !== "f32" || t.shape.join() !== perBlock.join())
  ) {
    ctx.fail(
      `packed bytes [${shape}] in blocks of ${bytes} bytes`,
      `give whole blocks of bytes and f32 scales (and zero points) of shape [${perBlock}]`,
      "shape-mismatch",
    );
  }
  return blocks;
}

/** Packed bytes [..., L] as their values [..., L, 8 / bits] in f32, lowest bits first. */
function unpack(e: Emitter, bytes: EmitRef, bits: number): EmitRef {
  const per = 8 / bits, shape = e.typeOf(bytes).shape;
  // Spread before the cast: a cast read under a broadcast would be stored first.
  const spread = e.op("Expand", [e.op("Unsqueeze", [bytes], { axes: [shape.length] })], {
    shape: [...shape, per],
  });
  const b = e.op("Cast", [spread], { to: "f32" });
  if (per === 1) return b;
  // Value s of byte b is ⌊b / 2^(s·bits)⌋ − 2^bits·⌊b / 2^((s+1)·bits)⌋.
  const below = (shift: number) =>
    e.op("Constant", [], {
      value: {
        data: Float32Array.from({ length: per }, (_, s) => 2 ** -((s + shift) * bits)),
        shape: [per],
        dtype: "f32",
      },
    });
  const floor = (scale: EmitRef) => e.op("Floor", [e.op("Mul", [b, scale])]);
  return e.op("Sub", [
    floor(below(0)),
    e.op("Mul", [floor(below(1)), e.scalar(2 ** bits, "f32")]),
  ]);
}

/** BlockDequantize's decomposition: [..., blocks · bytes] → [..., blocks · block]. */
function dequantize(e: Emitter, [bytes, scales, zeros]: readonly EmitRef[], bits: number): EmitRef {
  const shape = e.typeOf(bytes).shape, lead = shape.slice(0, -1);
  const blocks = e.typeOf(scales).shape.at(-1)!, size = (shape.at(-1)! / blocks) * (8 / bits);
  const grouped = e.op("Reshape", [bytes], { shape: [...lead, blocks, shape.at(-1)! / blocks] });
  const values = e.op("Reshape", [unpack(e, grouped, bits)], { shape: [...lead, blocks, size] });
  const perBlock = (t: EmitRef) => e.op("Unsqueeze", [t], { axes: [lead.length + 1] });
  const zero = zeros ? perBlock(zeros) : e.scalar(2 ** (bits - 1), "f32");
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

function weightOf(e: Emitter, [a, ...packed]: readonly EmitRef[], attrs: Attrs): EmitRef {
  const k = e.typeOf(a).shape.at(-1)!, dtype = e.typeOf(a).dtype;
  const rows = e.op("BlockDequantize", packed, { bits: attrs.bits, block: attrs.block });
  const width = e.typeOf(rows).shape[1];
  const cut = width === k ? rows : e.op("Slice", [rows], { starts: [0], ends: [k], axes: [1] });
  const w = e.op("Transpose", [cut], { perm: [1, 0] });
  return dtype === "f32" ? w : e.op("Cast", [w], { to: dtype });
}

/**
 * Whether fusion should build a BlockMatMul with A of `rows` rows (batch · M) as one kernel
 * where the generator unpacks in registers: a product of few rows reads each weight byte once
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
    const { block, bytes } = blockForm(ctx);
    const blocks = checkPacked(ctx, 0, bytes), shape = ctx.input(0).shape;
    return [{ shape: [...shape.slice(0, -1), blocks * block], dtype: "f32" }];
  },
  decompose: (e, ins, attrs) => [dequantize(e, ins, attrs.bits as number)],
}, {
  name: "BlockMatMul",
  category: "matmul",
  arity: [3, 4],
  primitive: false,
  infer: (ctx) => {
    ctx.requireDType(0, ["f32", "f16"]);
    const { block, bytes } = blockForm(ctx);
    const blocks = checkPacked(ctx, 1, bytes), a = ctx.input(0).shape, w = ctx.input(1).shape;
    const k = a.at(-1) ?? 0;
    if (w.length !== 2 || a.length < 1 || k > blocks * block || k <= (blocks - 1) * block) {
      ctx.fail(
        `A [${a}] times ${blocks} blocks of ${block} a row`,
        "give B as [N, blocks · bytes] and A a last axis K with ⌈K / block⌉ blocks",
        "shape-mismatch",
      );
    }
    return [{ shape: [...a.slice(0, -1), w[0]], dtype: ctx.input(0).dtype }];
  },
  decompose: (e, ins, attrs) => [e.op("MatMul", [ins[0], weightOf(e, ins, attrs)])],
}];

defineOps(blockOps);
