/**
 * The tiled matmul's form for quantized products over bytes (`jit/passes/byte_products.ts`: a u8
 * activation by i8 weights, summed in i32): each workgroup-memory word of a tile holds four K
 * values as signed bytes, and WGSL's `dot4I8Packed` (`packed_4x8_integer_dot_product`) sums four
 * products an instruction where the f32 tiles take one fused multiply-add each. The tiles' loop,
 * shapes and epilogue are `matmul.ts`'s; this module is what differs: which kernels take it, how
 * a slot of a tile is packed, and a step's products.
 *
 * `dot4I8Packed` multiplies signed bytes, so A's u8 values are stored less 128 and each thread
 * sums its columns of B as it goes: Σ (a − 128)·b + 128·Σ b = Σ a·b, exact in i32 and wrapping as
 * ONNX Runtime's int32 sums do. A zero filled past M, N or K adds nothing either way (B's is 0).
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
import type { Emitter, KernelLowering } from "./expr.ts";

/** Four bytes of 1: `dot4I8Packed(x, ONES)` sums the four signed bytes of x. */
const ONES = "0x01010101u";

/**
 * The operands of a quantized product over bytes: an i32 sum of a u8 A times an i8 B, each
 * widened by a Cast, K a multiple of 4; `undefined` for anything else.
 */
export function byteContraction(kernel: KernelIR): MatmulOperands | undefined {
  const widened = (e: Expr) =>
    e.kind === "alu" && e.op === "Cast" && e.dtype === "i32" && e.args[0].kind === "load" &&
      !gathers(e.args[0].steps)
      ? e.args[0]
      : undefined;
  const operands = contractionOperands(kernel, (d) => d === "i32", widened);
  const bytes = operands?.a.dtype === "u8" && operands.b.dtype === "i8" && operands.k % 4 === 0;
  return bytes ? operands : undefined;
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
  /** A's slot (u8 values, stored less 128) or B's (i8 values as they are). */
  readonly unsigned: boolean;
  /** Emits `fill` where the element is inside the operand, `zero` elsewhere. */
  readonly guarded: (fill: () => void, zero: () => void) => void;
}

/**
 * Fills register `slot` (a vec4 of words) with four outputs' words of four consecutive K values
 * of `op`, each as a signed byte.
 */
export function packSlot(s: ByteSlot, op: Load, slot: string): void {
  const { l, x, kAx, ax } = s, e = l.e;
  e.block("for (var j = 0; j < 4; j++) {", () => {
    e.line("var packed = 0u;");
    e.block("for (var i = 0; i < 4; i++) {", () => {
      e.line(`${x[ax]} = ${s.o0} + (${s.q}) * 4 + j;`);
      e.line(`${x[kAx]} = ${s.k0} + (${s.kq}) * 4 + i;`);
      s.guarded(() => {
        const v = `u32(${l.value(op as Expr, new Map())})${s.unsigned ? " ^ 128u" : ""}`;
        e.line(`packed = packed | ((${v}) & 255u) << (8u * u32(i));`);
      }, () => {});
    });
    e.line(`${slot}[j] = packed;`);
  });
}

/**
 * A step's products for a thread of `pm` rows (in `a0…`, vec4s of words) by `pn` columns
 * (`b0…`): accumulators `acc_r_h` (vec4<i32> over four columns) and the columns' sums `cs_h`.
 */
export function byteProducts(e: Emitter, pm: number, pn: number): void {
  const dots = (a: string, b: string) =>
    `vec4<i32>(${[..."xyzw"].map((c) => `dot4I8Packed(${a}, ${b}.${c})`).join(", ")})`;
  for (let r = 0; r < pm; r++) {
    const a = `a${r >> 2}.${"xyzw"[r & 3]}`;
    for (let h = 0; h < pn / 4; h++) e.line(`acc_${r}_${h} = acc_${r}_${h} + ${dots(a, `b${h}`)};`);
  }
  for (let h = 0; h < pn / 4; h++) e.line(`cs_${h} = cs_${h} + ${dots(ONES, `b${h}`)};`);
}

/** After the steps: 128 times each column's sum of B added back (A's bytes were less 128). */
export function byteSums(e: Emitter, pm: number, pn: number): void {
  for (let r = 0; r < pm; r++) {
    for (let h = 0; h < pn / 4; h++) e.line(`acc_${r}_${h} = acc_${r}_${h} + cs_${h} * 128;`);
  }
}
