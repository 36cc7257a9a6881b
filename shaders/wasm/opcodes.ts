/**
 * The WebAssembly instructions kiln's generators emit, by the namespace they are built from
 * (`m.i32.add`, `m.f32x4.mul`, …) and their encodings: scalar opcodes are one byte (or `0xfc`
 * and an index for the saturating truncations), SIMD ones `0xfd` and an index (the index of
 * relaxed SIMD's multiply-add, `0x105`, takes two LEB128 bytes). Names and argument orders are
 * the WebAssembly text format's, as Binaryen.js spells them, so the generators read as the
 * instructions they emit.
 *
 * @module
 */

/** A WebAssembly value type's byte in the binary format, or a marker (see below). */
export type Type = number;

/** The value types and the markers of expressions without a value. */
export const TYPES = {
  /** No value (a statement; the empty block type). */
  none: 0x40,
  /** An expression that never completes (a branch, a return). */
  unreachable: 0,
  i32: 0x7f,
  i64: 0x7e,
  f32: 0x7d,
  f64: 0x7c,
  v128: 0x7b,
} as const;

/** One instruction: its encoding after the operands, and the type of its value. */
export interface OpCode {
  /** The bytes that follow the operands (prefix, index). */
  readonly code: readonly number[];
  /** The result's type. */
  readonly type: Type;
}

const { i32, f32, f64, v128 } = TYPES;
/** An SIMD instruction of index `index` (its LEB128 after the `0xfd` prefix). */
const simd = (index: number): number[] =>
  index < 0x80 ? [0xfd, index] : [0xfd, index & 0x7f | 0x80, index >> 7];

/** Operators taking operands of one type, by name: [opcode(s), result type]. */
type Table = Record<string, readonly [number | readonly number[], Type]>;
const table = <T extends Table>(t: T): { readonly [K in keyof T]: OpCode } =>
  Object.fromEntries(
    Object.entries(t).map(([name, [code, type]]) => [name, {
      code: typeof code === "number" ? [code] : code,
      type,
    }]),
  ) as { readonly [K in keyof T]: OpCode };

/** i32 operators of one operand. */
export const I32_UNARY = table({
  eqz: [0x45, i32],
  clz: [0x67, i32],
  ctz: [0x68, i32],
  popcnt: [0x69, i32],
  /** The bits of an f32 as an i32. */
  reinterpret: [0xbc, i32],
});

/** i32 operators of two operands. */
export const I32_BINARY = table({
  eq: [0x46, i32],
  ne: [0x47, i32],
  lt_s: [0x48, i32],
  lt_u: [0x49, i32],
  gt_s: [0x4a, i32],
  gt_u: [0x4b, i32],
  le_s: [0x4c, i32],
  le_u: [0x4d, i32],
  ge_s: [0x4e, i32],
  ge_u: [0x4f, i32],
  add: [0x6a, i32],
  sub: [0x6b, i32],
  mul: [0x6c, i32],
  div_s: [0x6d, i32],
  div_u: [0x6e, i32],
  rem_s: [0x6f, i32],
  rem_u: [0x70, i32],
  and: [0x71, i32],
  or: [0x72, i32],
  xor: [0x73, i32],
  shl: [0x74, i32],
  shr_s: [0x75, i32],
  shr_u: [0x76, i32],
  rotl: [0x77, i32],
  rotr: [0x78, i32],
});

/** f32 (`f`) and f64 (`d`) opcodes of the operators both float types have. */
const FLOAT = {
  eq: [0x5b, 0x61],
  ne: [0x5c, 0x62],
  lt: [0x5d, 0x63],
  gt: [0x5e, 0x64],
  le: [0x5f, 0x65],
  ge: [0x60, 0x66],
  abs: [0x8b, 0x99],
  neg: [0x8c, 0x9a],
  ceil: [0x8d, 0x9b],
  floor: [0x8e, 0x9c],
  trunc: [0x8f, 0x9d],
  nearest: [0x90, 0x9e],
  sqrt: [0x91, 0x9f],
  add: [0x92, 0xa0],
  sub: [0x93, 0xa1],
  mul: [0x94, 0xa2],
  div: [0x95, 0xa3],
  min: [0x96, 0xa4],
  max: [0x97, 0xa5],
  copysign: [0x98, 0xa6],
} as const;
const COMPARISONS = new Set(["eq", "ne", "lt", "gt", "le", "ge"]);
/** Float operators of one operand (the rest take two). */
type FloatUnary = "abs" | "neg" | "ceil" | "floor" | "trunc" | "nearest" | "sqrt";
const UNARY = new Set<string>(["abs", "neg", "ceil", "floor", "trunc", "nearest", "sqrt"]);

/** A float type's operators of one operand and of two. */
export interface FloatOps {
  readonly unary: Readonly<Record<FloatUnary, OpCode>>;
  readonly binary: Readonly<Record<Exclude<keyof typeof FLOAT, FloatUnary>, OpCode>>;
}

/** The operators of f32 or (`wide`) f64. */
function floatOps(wide: boolean, type: Type): FloatOps {
  const pick = (unary: boolean) =>
    Object.fromEntries(
      Object.entries(FLOAT).filter(([name]) => UNARY.has(name) === unary).map((
        [name, codes],
      ) => [name, { code: [codes[wide ? 1 : 0]], type: COMPARISONS.has(name) ? i32 : type }]),
    );
  return { unary: pick(true), binary: pick(false) } as unknown as FloatOps;
}

/** f32 operators. */
export const F32 = floatOps(false, f32);
/** f64 operators. */
export const F64 = floatOps(true, f64);

/** Conversions, by target namespace and name, then source type where the name has several. */
export const CONVERSIONS = {
  i32: {
    trunc_s_sat: { f32: { code: [0xfc, 0], type: i32 }, f64: { code: [0xfc, 2], type: i32 } },
    trunc_u_sat: { f32: { code: [0xfc, 1], type: i32 }, f64: { code: [0xfc, 3], type: i32 } },
  },
  f32: {
    convert_s: { i32: { code: [0xb2], type: f32 } },
    convert_u: { i32: { code: [0xb3], type: f32 } },
    demote: { code: [0xb6], type: f32 },
    reinterpret: { code: [0xbe], type: f32 },
  },
  f64: {
    convert_s: { i32: { code: [0xb7], type: f64 } },
    convert_u: { i32: { code: [0xb8], type: f64 } },
    promote: { code: [0xbb], type: f64 },
  },
} as const;

/** Memory access opcodes and natural alignments (bytes), by namespace: [load, store, align]. */
export const MEMORY = {
  i32: [0x28, 0x36, 4],
  f32: [0x2a, 0x38, 4],
  f64: [0x2b, 0x39, 8],
  v128: [simd(0x00), simd(0x0b), 16],
} as const;

/** `v128.load32_splat`: one 4-byte element loaded into every lane. */
export const LOAD32_SPLAT: readonly number[] = simd(0x09);

/** Constants' opcodes. */
export const CONST = { i32: 0x41, f32: 0x43, f64: 0x44, v128: simd(0x0c) } as const;

/** v128 operators (bitwise, on any lanes). */
export const V128 = {
  unary: table({ not: [simd(0x4d), v128], any_true: [simd(0x53), i32] }),
  binary: table({
    and: [simd(0x4e), v128],
    andnot: [simd(0x4f), v128],
    or: [simd(0x50), v128],
    xor: [simd(0x51), v128],
  }),
  ternary: table({ bitselect: [simd(0x52), v128] }),
};

/**
 * A lane shape's operators: `splat`, `extract_lane`/`replace_lane` (the lane an immediate),
 * then operators of one, two and three v128 operands, and shifts (a v128 and an i32).
 */
export interface Lanes<U extends string, B extends string, T extends string, S extends string> {
  readonly splat: OpCode;
  readonly extract: OpCode;
  readonly replace: OpCode;
  readonly unary: Readonly<Record<U, OpCode>>;
  readonly binary: Readonly<Record<B, OpCode>>;
  readonly ternary: Readonly<Record<T, OpCode>>;
  readonly shifts: Readonly<Record<S, OpCode>>;
}

/** i8x16 operators (only what byte shuffles, nibble unpacking and byte packing need). */
export const I8X16 = {
  shuffle: { code: simd(0x0d), type: v128 },
  splat: { code: simd(0x0f), type: v128 },
  shr_u: { code: simd(0x6d), type: v128 },
  narrow_i16x8_s: { code: simd(0x65), type: v128 },
  narrow_i16x8_u: { code: simd(0x66), type: v128 },
} as const;

/** i16x8 operators (only what packing integer products and unpacking nibbles need). */
export const I16X8 = {
  splat: { code: simd(0x10), type: v128 },
  extract: { code: simd(0x18), type: i32 },
  replace: { code: simd(0x1a), type: v128 },
  unary: {},
  // Two i32x4 to eight i16 lanes, saturating (integer products pack values that fit).
  binary: table({ narrow_i32x4_s: [simd(0x85), v128] }),
  ternary: {},
  // A shift of 16-bit lanes and a mask splits bytes into nibbles: x86 has no 8-bit shift.
  shifts: table({ shr_u: [simd(0x8d), v128] }),
} as const;

/** i32x4 operators. */
export const I32X4 = {
  splat: { code: simd(0x11), type: v128 },
  extract: { code: simd(0x1b), type: i32 },
  replace: { code: simd(0x1c), type: v128 },
  unary: table({
    abs: [simd(0xa0), v128],
    neg: [simd(0xa1), v128],
    all_true: [simd(0xa3), i32],
    bitmask: [simd(0xa4), i32],
    trunc_sat_f32x4_s: [simd(0xf8), v128],
    trunc_sat_f32x4_u: [simd(0xf9), v128],
    trunc_sat_f64x2_s_zero: [simd(0xfc), v128],
    trunc_sat_f64x2_u_zero: [simd(0xfd), v128],
  }),
  binary: table({
    eq: [simd(0x37), v128],
    ne: [simd(0x38), v128],
    lt_s: [simd(0x39), v128],
    lt_u: [simd(0x3a), v128],
    gt_s: [simd(0x3b), v128],
    gt_u: [simd(0x3c), v128],
    le_s: [simd(0x3d), v128],
    le_u: [simd(0x3e), v128],
    ge_s: [simd(0x3f), v128],
    ge_u: [simd(0x40), v128],
    add: [simd(0xae), v128],
    sub: [simd(0xb1), v128],
    mul: [simd(0xb5), v128],
    // Pairwise products of i16 lanes summed into i32 lanes: eight multiply-adds an instruction.
    dot_i16x8_s: [simd(0xba), v128],
    min_s: [simd(0xb6), v128],
    min_u: [simd(0xb7), v128],
    max_s: [simd(0xb8), v128],
    max_u: [simd(0xb9), v128],
  }),
  // Relaxed SIMD: each lane adds the four products of its bytes, the second operand's in
  // [0, 127] (x86's byte multiply-add takes it unsigned): sixteen multiply-adds an instruction.
  ternary: table({ relaxed_dot_i8x16_i7x16_add_s: [simd(0x113), v128] }),
  shifts: table({ shl: [simd(0xab), v128], shr_s: [simd(0xac), v128], shr_u: [simd(0xad), v128] }),
} as const;

/** i64x2 operators. */
export const I64X2 = {
  splat: { code: simd(0x12), type: v128 },
  extract: { code: simd(0x1d), type: TYPES.i64 },
  replace: { code: simd(0x1e), type: v128 },
  unary: table({
    neg: [simd(0xc1), v128],
    extend_low_i32x4_s: [simd(0xc7), v128],
    extend_high_i32x4_s: [simd(0xc8), v128],
  }),
  binary: table({ add: [simd(0xce), v128], sub: [simd(0xd1), v128] }),
  ternary: {},
  shifts: table({ shl: [simd(0xcb), v128], shr_s: [simd(0xcc), v128], shr_u: [simd(0xcd), v128] }),
} as const;

/** f32x4 and f64x2 indices (f32x4 first) of the operators both float lane shapes have. */
const FLOAT_LANES = {
  eq: [0x41, 0x47],
  ne: [0x42, 0x48],
  lt: [0x43, 0x49],
  gt: [0x44, 0x4a],
  le: [0x45, 0x4b],
  ge: [0x46, 0x4c],
  ceil: [0x67, 0x74],
  floor: [0x68, 0x75],
  trunc: [0x69, 0x7a],
  nearest: [0x6a, 0x94],
  abs: [0xe0, 0xec],
  neg: [0xe1, 0xed],
  sqrt: [0xe3, 0xef],
  add: [0xe4, 0xf0],
  sub: [0xe5, 0xf1],
  mul: [0xe6, 0xf2],
  div: [0xe7, 0xf3],
  min: [0xe8, 0xf4],
  max: [0xe9, 0xf5],
  pmin: [0xea, 0xf6],
  pmax: [0xeb, 0xf7],
  relaxed_madd: [0x105, 0x107],
  relaxed_nmadd: [0x106, 0x108],
} as const;
/** Float lane operators of three operands (the rest take one or two, as the scalar ones). */
type LaneTernary = "relaxed_madd" | "relaxed_nmadd";
/** The f32x4 or f64x2 operators, with the shape's own conversions `Own`. */
type FloatLanes<Own extends string> = Lanes<
  FloatUnary | Own,
  Exclude<keyof typeof FLOAT_LANES, FloatUnary | LaneTernary>,
  LaneTernary,
  never
>;

/** The float lane shape's operators (`wide`: f64x2) with its own conversions. */
function floatLanes<Own extends string>(
  wide: boolean,
  scalar: Type,
  own: Record<Own, readonly [readonly number[], Type]>,
): FloatLanes<Own> {
  const arity = (name: string) =>
    name === "relaxed_madd" || name === "relaxed_nmadd" ? 3 : UNARY.has(name) ? 1 : 2;
  const pick = (n: number) =>
    Object.fromEntries(
      Object.entries(FLOAT_LANES).filter(([name]) => arity(name) === n).map((
        [name, codes],
      ) => [name, { code: simd(codes[wide ? 1 : 0]), type: v128 }]),
    );
  return {
    splat: { code: simd(wide ? 0x14 : 0x13), type: v128 },
    extract: { code: simd(wide ? 0x21 : 0x1f), type: scalar },
    replace: { code: simd(wide ? 0x22 : 0x20), type: v128 },
    unary: { ...pick(1), ...table(own) },
    binary: pick(2),
    ternary: pick(3),
    shifts: {},
  } as unknown as FloatLanes<Own>;
}

/** f32x4 operators. */
export const F32X4: FloatLanes<"convert_i32x4_s" | "convert_i32x4_u" | "demote_f64x2_zero"> =
  floatLanes(false, f32, {
    convert_i32x4_s: [simd(0xfa), v128],
    convert_i32x4_u: [simd(0xfb), v128],
    demote_f64x2_zero: [simd(0x5e), v128],
  });

/** f64x2 operators. */
export const F64X2: FloatLanes<
  "convert_low_i32x4_s" | "convert_low_i32x4_u" | "promote_low_f32x4"
> = floatLanes(true, f64, {
  convert_low_i32x4_s: [simd(0xfe), v128],
  convert_low_i32x4_u: [simd(0xff), v128],
  promote_low_f32x4: [simd(0x5f), v128],
});

// The namespaces' instructions as the module builder (`shaders/wasm/encoder.ts`) offers them.

/** An expression of a module being built. */
export type ExpressionRef = number;

type Ref = ExpressionRef;
type Fn1 = (a: Ref) => Ref;
type Fn2 = (a: Ref, b: Ref) => Ref;
type Fn3 = (a: Ref, b: Ref, c: Ref) => Ref;

/** Loads and stores of a namespace: `align` in bytes (0: natural), `offset` a constant. */
export interface MemoryOps {
  /** A load from `ptr + offset`. */
  load(offset: number, align: number, ptr: Ref): Ref;
  /** A store of `value` at `ptr + offset`. */
  store(offset: number, align: number, ptr: Ref, value: Ref): Ref;
}

/** The operators of a table as functions of their operands. */
export type Fns<T, F> = { readonly [K in keyof T]: F };

/** i32 instructions. */
export type I32Ops =
  & Fns<typeof I32_UNARY, Fn1>
  & Fns<typeof I32_BINARY, Fn2>
  & MemoryOps
  & {
    /** An i32 constant (`value` taken modulo 2³²). */
    const(value: number): Ref;
    /** f32 or f64 to i32, saturating; NaN gives 0. */
    readonly trunc_s_sat: { readonly f32: Fn1; readonly f64: Fn1 };
    /** f32 or f64 to u32, saturating; NaN gives 0. */
    readonly trunc_u_sat: { readonly f32: Fn1; readonly f64: Fn1 };
    /** Stores the low byte of `value` at `ptr + offset`. */
    store8(offset: number, ptr: Ref, value: Ref): Ref;
    /** The byte at `ptr + offset`, zero-extended. */
    load8_u(offset: number, ptr: Ref): Ref;
  };

/** f32 or f64 instructions. */
export type FloatInstructions =
  & Fns<FloatOps["unary"], Fn1>
  & Fns<FloatOps["binary"], Fn2>
  & MemoryOps
  & {
    /** A float constant (rounded to the type). */
    const(value: number): Ref;
    /** i32 to the float type. */
    readonly convert_s: { readonly i32: Fn1 };
    /** u32 to the float type. */
    readonly convert_u: { readonly i32: Fn1 };
  };

/** A lane shape's instructions. */
export type LaneOps<L> = L extends Lanes<infer U, infer B, infer T, infer S> ?
    & Fns<Record<U, 0>, Fn1>
    & Fns<Record<B, 0>, Fn2>
    & Fns<Record<T, 0>, Fn3>
    & Fns<Record<S, 0>, Fn2>
    & {
      /** Every lane `x`. */
      splat: Fn1;
      /** Lane `lane` of `vec`. */
      extract_lane(vec: Ref, lane: number): Ref;
      /** `vec` with lane `lane` replaced by `value`. */
      replace_lane(vec: Ref, lane: number, value: Ref): Ref;
    }
  : never;

/** v128 instructions. */
export type V128Ops =
  & Fns<typeof V128.unary, Fn1>
  & Fns<typeof V128.binary, Fn2>
  & Fns<typeof V128.ternary, Fn3>
  & MemoryOps
  & {
    /** A constant of 16 bytes. */
    const(bytes: readonly number[]): Ref;
    /** 4 bytes at `ptr + offset` in every lane: one instruction, not a load and a splat. */
    load32_splat(offset: number, align: number, ptr: Ref): Ref;
  };
