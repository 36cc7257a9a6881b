/**
 * The tiled matmul's form for quantized products over bytes (`jit/passes/byte_products.ts`: a u8
 * activation by i8 weights, summed in i32): each workgroup-memory word of a tile holds four K
 * values as signed bytes, and WGSL's `dot4I8Packed` (`packed_4x8_integer_dot_product`) sums four
 * products an instruction where the f32 tiles take one fused multiply-add each. The tiles' loop,
 * shapes and epilogue are `matmul.ts`'s; this module is what differs: which kernels take it, how
 * a slot of a tile is packed, and a step's products.
 *
 * `dot4I8Packed` multiplies signed bytes, so the u8 operand's values are stored less 128 and each
 * thread sums the i8 operand's values along K as it goes (its columns of B, or its rows of A):
 * Σ (a − 128)·b + 128·Σ b = Σ a·b, exact in i32 and wrapping as ONNX Runtime's int32 sums do. A
 * zero filled past M, N or K adds nothing either way (the i8 operand's is 0 there too). Operands
 * whose four consecutive K values, or four consecutive outputs, are an aligned vec4 in memory are
 * read a vec4 at a time and packed by `pack4xU8` / `pack4xI8`.
 *
 * @module
 */
import {
  contractionOperands,
  type Expr,
  gathers,
  type KernelIR,
  type Load,
  type MatmulOperands,
} from "../../jit/ir/kernel_ir.ts";
import type { KernelLowering } from "./expr.ts";
import type { Emitter } from "./emit.ts";
import { quadAligned, readOnce } from "./quads.ts";

/** Four bytes of 1: `dot4I8Packed(x, ONES)` sums the four signed bytes of x. */
const ONES = "0x01010101u";

/** A product over bytes: its operands, and which of them holds the u8 values. */
export interface ByteOperands {
  readonly operands: MatmulOperands;
  readonly unsigned: "a" | "b";
}

/**
 * The operands of a quantized product over bytes: an i32 sum of a u8 factor times an i8 one (in
 * either order: a convolution's weights may be its A), each widened by a Cast, K a multiple of 4;
 * `undefined` for anything else.
 */
export function byteContraction(kernel: KernelIR): ByteOperands | undefined {
  const widened = (e: Expr) =>
    e.kind === "alu" && e.op === "Cast" && e.dtype === "i32" && e.args[0].kind === "load" &&
      !gathers(e.args[0].steps)
      ? e.args[0]
      : undefined;
  const operands = contractionOperands(kernel, (d) => d === "i32", widened);
  if (!operands || operands.k % 4 !== 0) return undefined;
  const types = `${operands.a.dtype},${operands.b.dtype}`;
  const unsigned = types === "u8,i8" ? "a" : types === "i8,u8" ? "b" : undefined;
  return unsigned && { operands, unsigned };
}

/** How a byte tile reads an operand: aligned vec4s along K, or along its outputs (or neither). */
export type ByteVector = "k" | "outputs" | undefined;

/**
 * How the byte tile of `op` (whose outputs lie along axis `ax`, K along `kAx`) reads it: as vec4s
 * where it is read once and four consecutive K values (or outputs) are aligned in memory.
 */
export function byteVector(kernel: KernelIR, op: Load, ax: number, kAx: number): ByteVector {
  if (!readOnce(kernel, op.input)) return undefined;
  const aligned = (axis: number) =>
    quadAligned(op.steps, kernel.space, kernel.inputs[op.input].shape, axis);
  return aligned(kAx) ? "k" : aligned(ax) && kernel.space[ax] % 4 === 0 ? "outputs" : undefined;
}

/** The inputs a byte tile reads as vec4 arrays (see {@linkcode byteVector}). */
export function byteVectors(kernel: KernelIR, { a, b, nb }: MatmulOperands): Set<number> {
  const read = [byteVector(kernel, a, nb, nb + 2), byteVector(kernel, b, nb + 1, nb + 2)];
  return new Set([a, b].flatMap((op, i) => (read[i] ? [op.input] : [])));
}

/** Where a slot of a byte tile is: its operand axis and the slot's place in the step. */
export interface ByteSlot {
  /** The kernel's lowering, coordinates `x` and K axis `kAx`. */
  readonly l: KernelLowering;
  readonly x: readonly string[];
  readonly kAx: number;
  /** The operand's output axis (M for A, N for B) and the tile's first output there. */
  readonly ax: number;
  readonly o0: string;
  /** The step's first K, the slot's word along K (a tile row) and its group of four outputs. */
  readonly k0: string;
  readonly kq: string;
  readonly q: string;
  /** Whether the operand holds u8 values (stored less 128) or i8 ones (stored as they are). */
  readonly unsigned: boolean;
  /** How it is read (see {@linkcode byteVector}). */
  readonly vector: ByteVector;
  /** Emits `fill` where the element is inside the operand, `zero` elsewhere. */
  readonly guarded: (fill: () => void, zero: () => void) => void;
}

/**
 * Fills register `slot` (a vec4 of words) with four outputs' words of four consecutive K values
 * of `op`, each as a signed byte.
 */
export function packSlot(s: ByteSlot, op: Load, slot: string): void {
  const { l, x, kAx, ax } = s, e = l.e;
  // The operand's element at the current coordinates (its offset's lines emitted per call).
  const at = () => l.offset(op.steps, l.kernel.inputs[op.input].shape).index;
  const quad = () => l.quad(op.input, at());
  const pack = (v: string) => s.unsigned ? `pack4xU8(${v} ^ vec4<u32>(128u))` : `pack4xI8(${v})`;
  if (s.vector === "k") {
    // Each output's four K values are one vec4: one word (as it lies, where the input is packed).
    const packed = l.kernel.inputs[op.input].packed;
    const word = () => {
      const w = l.packedWord(op.input, at());
      return s.unsigned ? `(${w} ^ 0x80808080u)` : w;
    };
    for (let j = 0; j < 4; j++) {
      e.line(`${x[ax]} = ${s.o0} + (${s.q}) * 4 + ${j};`);
      e.line(`${x[kAx]} = ${s.k0} + (${s.kq}) * 4;`);
      const lane = `${slot}.${"xyzw"[j]}`;
      const value = () => packed ? word() : pack(quad());
      s.guarded(() => e.line(`${lane} = ${value()};`), () => e.line(`${lane} = 0u;`));
    }
    return;
  }
  if (s.vector === "outputs") {
    // Four vec4s of four outputs at four consecutive K, their lanes gathered into words.
    const t = `vec4<${l.stored(op.dtype)}>`;
    e.line(`${x[ax]} = ${s.o0} + (${s.q}) * 4;`);
    for (let i = 0; i < 4; i++) {
      e.line(`var ${slot}_${i} = ${t}();`);
      e.line(`${x[kAx]} = ${s.k0} + (${s.kq}) * 4 + ${i};`);
      s.guarded(() => e.line(`${slot}_${i} = ${quad()};`), () => {});
    }
    for (let j = 0; j < 4; j++) {
      const lanes = [0, 1, 2, 3].map((i) => `${slot}_${i}.${"xyzw"[j]}`).join(", ");
      e.line(`${slot}.${"xyzw"[j]} = ${pack(`${t}(${lanes})`)};`);
    }
    return;
  }
  e.block("for (var j = 0; j < 4; j++) {", () => {
    e.line("var packed = 0u;");
    e.block("for (var i = 0; i < 4; i++) {", () => {
      e.line(`${x[ax]} = ${s.o0} + (${s.q}) * 4 + j;`);
      e.line(`${x[kAx]} = ${s.k0} + (${s.kq}) * 4 + i;`);
      s.guarded(() => {
        const v = `u32(${l.value(op as Expr, new Map())})${s.unsigned ? " ^ 128u" : ""}`;
        // Tint asks for the parentheses around a shift beside a bitwise or.
        e.line(`packed = packed | (((${v}) & 255u) << (8u * u32(i)));`);
      }, () => {});
    });
    e.line(`${slot}[j] = packed;`);
  });
}

/** The sums along K of the i8 operand a thread holds: its rows of A, or its columns of B. */
function sumsOf(unsigned: "a" | "b", pm: number, pn: number): string[] {
  return unsigned === "a"
    ? [...Array(pn / 4).keys()].map((h) => `cs_${h}`)
    : [...Array(pm).keys()].map((r) => `rs_${r}`);
}

/** A thread's sums of the i8 operand (see {@linkcode byteSums}), declared before the steps. */
export function byteSumDecls(e: Emitter, unsigned: "a" | "b", pm: number, pn: number): void {
  const t = unsigned === "a" ? "vec4<i32>()" : "0i";
  for (const v of sumsOf(unsigned, pm, pn)) e.line(`var ${v} = ${t};`);
}

/**
 * A step's products for a thread of `pm` rows (in `a0…`, vec4s of words) by `pn` columns
 * (`b0…`): accumulators `acc_r_h` (vec4<i32> over four columns) and the i8 operand's sums.
 */
export function byteProducts(e: Emitter, unsigned: "a" | "b", pm: number, pn: number): void {
  const dots = (a: string, b: string) =>
    `vec4<i32>(${[..."xyzw"].map((c) => `dot4I8Packed(${a}, ${b}.${c})`).join(", ")})`;
  const row = (r: number) => `a${r >> 2}.${"xyzw"[r & 3]}`;
  for (let r = 0; r < pm; r++) {
    for (let h = 0; h < pn / 4; h++) {
      e.line(`acc_${r}_${h} = acc_${r}_${h} + ${dots(row(r), `b${h}`)};`);
    }
  }
  const sums = sumsOf(unsigned, pm, pn);
  sums.forEach((v, i) => {
    const step = unsigned === "a" ? dots(ONES, `b${i}`) : `dot4I8Packed(${row(i)}, ${ONES})`;
    e.line(`${v} = ${v} + ${step};`);
  });
}

/**
 * After the steps: 128 times the i8 operand's sums added back (the u8 operand's bytes were less
 * 128), each column's to its outputs (or each row's).
 */
export function byteSums(e: Emitter, unsigned: "a" | "b", pm: number, pn: number): void {
  for (let r = 0; r < pm; r++) {
    for (let h = 0; h < pn / 4; h++) {
      const sum = unsigned === "a" ? `cs_${h}` : `vec4<i32>(rs_${r})`;
      e.line(`acc_${r}_${h} = acc_${r}_${h} + ${sum} * 128;`);
    }
  }
}
