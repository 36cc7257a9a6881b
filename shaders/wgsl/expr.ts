/**
 * Scalar WGSL lowering shared by every generated kernel: the storage type of each dtype, literals,
 * ALU ops with the reference's IEEE and integer semantics (re-rounded to the result dtype after
 * every op), and a kernel's expressions at a point (`KernelLowering`; its statements and index
 * arithmetic are `emit.ts`'s).
 *
 * @module
 */
import { type DType, intRange } from "../../jit/ir/dtype.ts";
import { KilnError } from "../../jit/support/errors.ts";
import type {
  AluOp,
  AluOperands,
  Expr,
  IndexStep,
  KernelIR,
  KernelOutput,
  Load,
} from "../../jit/ir/kernel_ir.ts";
import { reindex } from "../../jit/ir/kernel_ir.ts";
import type { Shape } from "../../jit/ir/shape.ts";
import { affineOffset } from "../../jit/ir/access.ts";
import { exactScale, mayCancel, overOnePlusExp, Structure } from "./cancel.ts";
import { allOf, anyOf } from "./prelude.ts";
import { applySteps, Emitter, type Guard, linear } from "./emit.ts";
/** The WGSL scalar type that holds a dtype. */
export function wgslType(dtype: DType): "f32" | "i32" | "u32" {
  return dtype === "f32" || dtype === "f16"
    ? "f32"
    : dtype === "i32" || dtype === "i16" || dtype === "i8"
    ? "i32"
    : "u32";
}

/**
 * The WGSL element type a buffer of `dtype` is stored as: f16 in 16 bits where `half` (the
 * device has `shader-f16`), every other dtype in 32-bit words ({@linkcode wgslType}).
 */
export function storedType(dtype: DType, half: boolean): string {
  return half && dtype === "f16" ? "f16" : wgslType(dtype);
}

/**
 * A kernel's storage buffers: inputs `in0…` (read-only) of element types `ins`, then outputs
 * `out0…` of `outs`, bound in that order; an input of no type is not bound (read from the output
 * stored over it, `in_place.ts`).
 */
export function storageBindings(
  ins: readonly (string | undefined)[],
  outs: readonly string[],
): string[] {
  const bound = ins.flatMap((t, i) => (t === undefined ? [] : [[t, i] as const]));
  return [
    ...bound.map(([t, i], j) => `@group(0) @binding(${j}) var<storage, read> in${i}: array<${t}>;`),
    ...outs.map((t, k) =>
      `@group(0) @binding(${bound.length + k}) var<storage, read_write> out${k}: array<${t}>;`
    ),
  ];
}

/** f32 NaN, +inf and -inf as WGSL expressions (Tint rejects them as constants). */
export const NAN = "bitcast<f32>(k_special.x)";
/** See {@linkcode NAN}. */
export const INF = "bitcast<f32>(k_special.y)";
/** See {@linkcode NAN}. */
export const NEG_INF = "bitcast<f32>(k_special.z)";

/** A literal of `value` in the WGSL type of `dtype`. */
export function literal(value: number, dtype: DType): string {
  const t = wgslType(dtype);
  if (t === "f32") {
    if (Number.isNaN(value)) return NAN;
    if (value === Infinity) return INF;
    if (value === -Infinity) return NEG_INF;
    return `bitcast<f32>(${new Uint32Array(new Float32Array([value]).buffer)[0]}u)`;
  }
  if (t === "i32") return `i32(${Math.trunc(value) | 0})`;
  return `${Math.trunc(value) >>> 0}u`;
}

/** Re-rounds `x` (of `dtype`'s WGSL type) to what storing it as `dtype` gives. */
export function rounded(x: string, dtype: DType): string {
  switch (dtype) {
    case "f16":
      return `k_f16(${x})`;
    case "i16":
      return `((${x} << 16u) >> 16u)`;
    case "u16":
      return `(${x} & 65535u)`;
    case "i8":
      return `((${x} << 24u) >> 24u)`;
    case "u8":
      return `(${x} & 255u)`;
    case "bool":
      return `select(0u, 1u, ${x} != 0u)`;
    default:
      return x;
  }
}

/** What an ALU lowering sees: the operands as WGSL text, and their WGSL type. */
interface AluArgs extends AluOperands<string> {
  /** WGSL type of the first argument (of the result when there is none). */
  readonly t: string;
  /** Whether that type is an integer. */
  readonly int: boolean;
  /** Whether the operands may cancel (see {@linkcode mayCancel}): IEEE specials need care. */
  readonly cancel: boolean;
  /** A float Div's divisor as an exact reciprocal to multiply by (see {@linkcode exactScale}). */
  readonly scale?: number;
  /** A float Div of a finite constant by 1 + exp(·) (see {@linkcode overOnePlusExp}). */
  readonly overExp?: boolean;
  /** The exact precision's kernel (`KernelIR.exact`): square roots rounded as IEEE rounds them. */
  readonly ieee?: boolean;
}

const flag = (cond: string) => `select(0u, 1u, ${cond})`;
/** A finite f32 literal as {@linkcode literal} writes it (NaN is written otherwise). */
const LITERAL = /^bitcast<f32>\(\d+u\)$/;
/**
 * A float comparison that is false when an operand is NaN, as IEEE says. WGSL lets a compiler
 * assume no NaNs: llvmpipe folds `select(x, 0, x < 0)` into `max(x, 0)`, so Relu(NaN) came out 0.
 * The explicit bit-level NaN test keeps that fold from applying; literals need none.
 */
function ordered(op: string, { a, int }: AluArgs): string {
  const cmp = `${a[0]} ${op} ${a[1]}`;
  if (int) return cmp;
  return allOf(cmp, ...a.filter((x) => !LITERAL.test(x)).map((x) => `!k_isnan(${x})`));
}
const builtin = (name: string) => ({ a }: AluArgs) => `${name}(${a[0]})`;

/**
 * WGSL has no exact float remainder (`%` is a − b·trunc(a / b), rounded twice), so an exact
 * precision kernel with one is refused rather than computed to other bits than the reference's.
 */
function exactRemainder(): KilnError {
  return new KilnError("The exact precision has no float remainder (Mod with fmod) on WebGPU", {
    code: "unsupported",
    fix: 'run the model on backend "wasm" or "reference", or compile with precision "f32"',
  });
}

/** Per ALU op: its WGSL expression. */
const WGSL_ALU = {
  Add: ({ a, cancel }) => (cancel ? `k_add(${a[0]}, ${a[1]})` : `(${a[0]} + ${a[1]})`),
  Sub: ({ a, cancel }) => (cancel ? `k_sub(${a[0]}, ${a[1]})` : `(${a[0]} - ${a[1]})`),
  Mul: ({ a, int, cancel }) =>
    int ? `(${a[0]} * ${a[1]})` : `${cancel ? "k_mul" : "k_prod"}(${a[0]}, ${a[1]})`,
  // Integer divisors are never zero here (see `jit/ir/integer_rules.ts`).
  Div: ({ a, int, scale, overExp, out }) => {
    if (int) return `(${a[0]} / ${a[1]})`;
    if (scale !== undefined) return `(${a[0]} * ${literal(scale, "f32")})`;
    if (overExp && out === "f32") return `k_fdivexp(${a[0]}, ${a[1]})`;
    return `${out === "f16" ? "k_hdiv" : "k_fdiv"}(${a[0]}, ${a[1]})`;
  },
  Pow: ({ a, t, int }) =>
    int ? `${t}(round(k_pow(f32(${a[0]}), f32(${a[1]}))))` : `k_pow(${a[0]}, ${a[1]})`,
  // The truncated remainder (fmod): a − b·(a / b), not %, which a software driver seen here
  // computes as unsigned for signed operands.
  Mod: ({ a, int, ieee }) => {
    if (int) return `(${a[0]} - ${a[1]} * (${a[0]} / ${a[1]}))`;
    if (ieee) throw exactRemainder();
    return `(${a[0]} % ${a[1]})`;
  },
  Equal: (x) => flag(ordered("==", x)),
  Greater: (x) => flag(ordered(">", x)),
  Less: (x) => flag(ordered("<", x)),
  // Logical on bool, bitwise on integers (re-rounded to i8/u8 after, as every op is).
  And: ({ a, out }) =>
    out === "bool" ? flag(allOf(`${a[0]} != 0u`, `${a[1]} != 0u`)) : `(${a[0]} & ${a[1]})`,
  Or: ({ a, out }) =>
    out === "bool" ? flag(anyOf(`${a[0]} != 0u`, `${a[1]} != 0u`)) : `(${a[0]} | ${a[1]})`,
  Not: ({ a, out }) => (out === "bool" ? flag(`${a[0]} == 0u`) : `(~${a[0]})`),
  Where: ({ a }) => `select(${a[2]}, ${a[1]}, ${a[0]} != 0u)`,
  Neg: ({ a }) => `(-${a[0]})`,
  Abs: builtin("abs"),
  Sqrt: ({ a, ieee, int }) => `${ieee && !int ? "k_sqrt" : "sqrt"}(${a[0]})`,
  Exp: builtin("exp"),
  Log: builtin("log"),
  Sin: builtin("sin"),
  Cos: builtin("cos"),
  Floor: builtin("floor"),
  Ceil: builtin("ceil"),
  Round: builtin("k_round"),
  Erf: builtin("k_erf"),
  IsNaN: ({ a }) => flag(`k_isnan(${a[0]})`),
  Cast: ({ a, d, out }) => cast(a[0], d[0], out),
  Bitcast: ({ a, out }) => `bitcast<${wgslType(out)}>(${a[0]})`,
} satisfies Record<AluOp, (args: AluArgs) => string>;

/**
 * WGSL for one ALU op over argument expressions `a` of dtypes `d`, producing `out`. `exact` says
 * what the operands' structure allows: whether float operands may cancel (default: assume they
 * may, see {@linkcode mayCancel}) and a Div's exact reciprocal scale ({@linkcode exactScale}).
 */
export function alu(
  op: AluOp,
  a: readonly string[],
  d: readonly DType[],
  out: DType,
  exact: { cancel?: boolean; scale?: number; overExp?: boolean; ieee?: boolean } = {},
): string {
  const t = wgslType(d[0] ?? out);
  const int = t !== "f32";
  const cancel = (exact.cancel ?? true) && !int;
  const { scale, overExp, ieee } = exact;
  return WGSL_ALU[op]({ a, d, out, t, int, cancel, scale, overExp, ieee });
}

/** Casts follow the reference: truncate and saturate into integers, NaN → 0, bool is x != 0. */
function cast(x: string, from: DType, to: DType): string {
  const tt = wgslType(to), ft = wgslType(from);
  if (to === "bool") return `select(0u, 1u, ${x} != ${literal(0, from)})`;
  if (tt === "f32") return `f32(${x})`;
  const [lo, hi] = intRange(to)!;
  if (ft === "f32") {
    return tt === "i32" ? `k_f2i(${x}, ${literal(lo, "i32")}, ${hi})` : `k_f2u(${x}, ${hi}u)`;
  }
  if (ft === "i32") {
    return tt === "i32"
      ? `clamp(${x}, ${literal(lo, "i32")}, ${hi})`
      : `u32(clamp(${x}, 0, ${Math.min(hi, 2147483647)}))`;
  }
  return tt === "i32" ? `i32(min(${x}, ${hi}u))` : `min(${x}, ${hi}u)`;
}

/**
 * Where a lowering puts values the same at every point (`shaders/wgsl/uniforms.ts`): computed
 * once in `e` with `memo`, each under the name `hoist` gives it.
 */
export interface UniformValues {
  /** Where they are computed. */
  readonly e: Emitter;
  /** What is computed there, shared by every point. */
  readonly memo: Map<Expr, string>;
  /** The name of each value hoisted so far. */
  readonly named: ReadonlyMap<Expr, string>;
  /** Whether `e` is the same at every point. */
  same(e: Expr): boolean;
  /** Hoists `e`, computed by WGSL `code`, and returns its name. */
  hoist(e: Expr, code: string): string;
}

/**
 * One kernel's expressions lowered at the current point: `coords` names each space axis's
 * coordinate (generators move it between lanes, tiles and helper functions), and every value is
 * a named `let` in the emitter `e`, shared within a point through a memo.
 */
export class KernelLowering {
  /** The kernel. */
  readonly kernel: KernelIR;
  /** Where statements go. */
  e: Emitter = new Emitter();
  /** The current point's coordinate per space axis, as WGSL `i32` expressions. */
  coords: string[];
  /** Binding name of each input. */
  readonly inputs: readonly string[];
  /** Binding name of each output. */
  readonly outputs: readonly string[];
  /**
   * Inputs (by index) and outputs (by `"out" + index`) that live elsewhere than in a binding
   * (fused attention keeps its intermediates in workgroup memory): the element at the current
   * point, as an assignable WGSL expression.
   */
  readonly redirect: Map<string, () => string> = new Map();
  /**
   * Inputs (by index) whose producer's expression the kernel computes where it reads them, in
   * that buffer's coordinates over this kernel's inputs (attention's rotated queries,
   * `query_in_place.ts`); each load reads it through its own steps.
   */
  readonly #inlined: ReadonlyMap<number, Expr>;
  /** Each inlined load's expression in this kernel's coordinates, made once a load. */
  #inlinedAt = new Map<Expr, Expr>();

  /** Whether f16 buffers hold 16-bit elements (converted to f32 on load, back on store). */
  readonly half: boolean;
  /**
   * The device's one subgroup size, where row combines may shuffle within subgroups
   * (`combineAcross`); `undefined`: through workgroup memory only.
   */
  readonly subgroup?: number;
  /** Set when the kernel's code calls subgroup operations (it then enables `subgroups`). */
  usesSubgroups = false;
  /** Where values the same at every point go, when the generator places them (`uniforms.ts`). */
  readonly uniforms?: UniformValues;
  // Loads compare by the element they read where their steps are affine, bounds or not: a bound
  // a compiler proves always met leaves it the same element (a Gather of index −1 on an axis of
  // one less its input folded to 0 on llvmpipe and the H200, where inf − inf is NaN), and
  // counting two loads the same where a fill may differ costs only a guarded subtraction.
  #structure = new Structure((l) => {
    const at = affineOffset(l.steps, this.kernel.space, this.kernel.inputs[l.input].shape);
    // An axis of extent 1 is always 0: its weight says nothing about the element.
    const weights = at && at.weights.map((w, i) => (this.kernel.space[i] === 1 ? 0 : w));
    return at ? `${weights}+${at.base}` : JSON.stringify(l.steps);
  });

  /** Lowers `kernel` with coordinates `${prefix}0`, `${prefix}1`, …, bindings `in…`/`out…`. */
  constructor(
    kernel: KernelIR,
    options: {
      prefix?: string;
      inputs?: readonly string[];
      outputs?: readonly string[];
      half?: boolean;
      subgroup?: number;
      uniforms?: UniformValues;
      inlined?: ReadonlyMap<number, Expr>;
    } = {},
  ) {
    this.kernel = kernel;
    this.#inlined = options.inlined ?? new Map();
    this.subgroup = options.subgroup;
    this.uniforms = options.uniforms;
    this.coords = kernel.space.map((_, i) => `${options.prefix ?? "x"}${i}`);
    this.inputs = options.inputs ?? kernel.inputs.map((_, i) => `in${i}`);
    this.outputs = options.outputs ?? kernel.outputs.map((_, k) => `out${k}`);
    this.half = options.half ?? false;
  }

  /** The WGSL element type of a buffer of `dtype`: its storage, not its arithmetic, type. */
  stored(dtype: DType): string {
    return storedType(dtype, this.half);
  }

  /** Element `index` (a u32 expression) of input `i`, in its arithmetic type. */
  element(i: number, index: string): string {
    if (this.kernel.inputs[i].packed === "nibbles") {
      return `extractBits(${this.inputs[i]}[(${index}) >> 3u], ((${index}) & 7u) * 4u, 4u)`;
    }
    if (this.kernel.inputs[i].packed) {
      // Byte `index % 4` of its word, sign-extended for i8 (extractBits does on an i32).
      const word = `${this.inputs[i]}[(${index}) >> 2u]`;
      const signed = this.kernel.inputs[i].dtype === "i8";
      return `extractBits(${signed ? `bitcast<i32>(${word})` : word}, ((${index}) & 3u) * 8u, 8u)`;
    }
    const at = `${this.inputs[i]}[${index}]`;
    return this.stored(this.kernel.inputs[i].dtype) === "f16" ? `f32(${at})` : at;
  }

  /**
   * The aligned vec4 of input `i` holding element `index` (an i32 expression), as vec4<f32> (or
   * vec4 of its integer type; a packed input's one word, its four bytes unpacked).
   */
  quad(i: number, index: string): string {
    if (this.kernel.inputs[i].packed === "nibbles") {
      // An aligned four is half a word: its first at bit 0 or 16.
      const word = `${this.inputs[i]}[u32(${index}) / 8u]`;
      const at = `(u32(${index}) & 4u) * 4u`;
      return `((vec4<u32>(${word}) >> (vec4<u32>(0u, 4u, 8u, 12u) + ${at})) & vec4<u32>(15u))`;
    }
    if (this.kernel.inputs[i].packed) {
      const word = this.packedWord(i, index);
      return this.kernel.inputs[i].dtype === "i8"
        ? `((vec4<i32>(bitcast<i32>(${word})) << vec4<u32>(24u, 16u, 8u, 0u)) >> vec4<u32>(24u))`
        : `((vec4<u32>(${word}) >> vec4<u32>(0u, 8u, 16u, 24u)) & vec4<u32>(255u))`;
    }
    const at = `${this.inputs[i]}[u32(${index}) / 4u]`;
    return this.stored(this.kernel.inputs[i].dtype) === "f16" ? `vec4<f32>(${at})` : at;
  }

  /** The word (u32) of packed input `i` holding its aligned element `index` and the next three. */
  packedWord(i: number, index: string): string {
    if (this.kernel.inputs[i].packed === "nibbles") {
      throw new KilnError(`WGSL: ${this.kernel.name} reads 4-bit input ${i} as bytes`, {
        code: "internal",
        fix: "hold a constant that byte tiles read four to a word (packedConstants)",
      });
    }
    return `${this.inputs[i]}[u32(${index}) / 4u]`;
  }

  /** `value` (arithmetic type) as stored in a buffer of `dtype`; `vec4` for four lanes. */
  toStored(value: string, dtype: DType, vec4 = false): string {
    const t = wgslType(dtype);
    if (this.stored(dtype) !== "f16") return vec4 ? `vec4<${t}>(${value})` : value;
    return vec4 ? `vec4<f16>(vec4<f32>(${value}))` : `f16(${value})`;
  }

  /** The element offset a load's or store's `steps` reach in a buffer of `shape`, with its guards. */
  offset(
    steps: readonly IndexStep[],
    shape: Shape,
    from: string[] = this.coords,
  ): { index: string; guards: Guard[] } {
    const { coords, guards } = applySteps(
      this.e,
      steps,
      from,
      (l, c, prior) => this.#read(l, c, prior),
    );
    return { index: linear(coords, shape), guards };
  }

  /**
   * A guarded read of input load `l` at coordinates `at` (the point's own by default), made only
   * where `prior` (the bounds of the steps before a gather) holds.
   */
  #read(l: Load, at: string[] = this.coords, prior?: string): string {
    const { index, guards } = this.offset(l.steps, this.kernel.inputs[l.input].shape, at);
    if (!guards.length && !prior) return this.element(l.input, `u32(${index})`);
    // The first failing step decides the fill, as in the interpreter; reads stay in range.
    const all = allOf(...(prior ? [prior] : []), ...guards.map((g) => g.ok));
    let code = this.element(l.input, `u32(select(0, ${index}, ${all}))`);
    for (const g of [...guards].reverse()) {
      code = `select(${literal(g.fill, l.dtype)}, ${code}, ${g.ok})`;
    }
    return code;
  }

  /** Emits `expr` at the current point; `memo` shares values within the point. */
  value(expr: Expr, memo: Map<Expr, string>): string {
    const hit = memo.get(expr) ?? this.uniforms?.named.get(expr);
    if (hit) return hit;
    let code: string;
    switch (expr.kind) {
      case "const":
        code = literal(expr.value, expr.dtype);
        break;
      case "acc":
        code = `acc${expr.index}`;
        break;
      case "load": {
        const elsewhere = this.redirect.get(String(expr.input));
        if (elsewhere) {
          code = elsewhere();
          break;
        }
        const inlined = this.#inlined.get(expr.input);
        if (inlined) {
          let at = this.#inlinedAt.get(expr);
          if (!at) this.#inlinedAt.set(expr, at = reindex(inlined, expr.steps));
          code = this.value(at, memo);
          break;
        }
        // A one-element buffer read without bounds: its element, wherever the steps go.
        code = this.uniforms?.same(expr) ? this.element(expr.input, "0u") : this.#read(expr);
        break;
      }
      case "alu": {
        // One the same everywhere is computed once, where the entry point starts (`uniforms.ts`).
        const [body, lift] = [this.e, this.uniforms?.same(expr) ? this.uniforms : undefined];
        if (lift) this.e = lift.e;
        const args = expr.args.map((a) => this.value(a, lift?.memo ?? memo));
        this.e = body;
        code = rounded(
          alu(
            expr.op,
            args,
            expr.args.map((a) => a.dtype),
            expr.dtype,
            {
              cancel: this.kernel.exact || mayCancel(expr.op, expr.args, this.#structure),
              scale: expr.op === "Div" ? exactScale(expr.args[1]) : undefined,
              overExp: expr.op === "Div" && overOnePlusExp(expr.args[0], expr.args[1]),
              ieee: this.kernel.exact,
            },
          ),
          expr.dtype,
        );
        break;
      }
    }
    if (expr.kind !== "const" && this.uniforms?.same(expr)) return this.uniforms.hoist(expr, code);
    const name = this.e.fresh("v");
    this.e.line(`let ${name}: ${wgslType(expr.dtype)} = ${code};`);
    memo.set(expr, name);
    return name;
  }

  /** Stores output `k` at the current point. */
  store(o: KernelOutput, k: number, memo: Map<Expr, string>): void {
    const v = this.value(o.expr, memo);
    if (o.combine) return this.combine(k, v);
    if (o.packed) {
      throw new KilnError(`WGSL: ${this.kernel.name} stores 8-bit output ${k} a point at a time`, {
        code: "internal",
        fix: "mark only outputs of vec4 points packed (packedConstants), or report this",
      });
    }
    const elsewhere = this.redirect.get(`out${k}`);
    if (elsewhere) {
      this.e.line(`${elsewhere()} = ${v};`);
      return;
    }
    const target = `${this.outputs[k]}[u32(${this.offset(o.steps, o.shape).index})]`;
    this.e.line(`${target} = ${this.toStored(v, o.dtype)};`);
  }

  /** Folds f32 `value` into combined output `k`'s largest so far (`shaders/wgsl/combined.ts`). */
  combine(k: number, value: string): void {
    // NaN wins, as the reference's max does (WGSL's max may return either operand).
    const m = this.largest(k);
    this.e.line(
      `${m} = select(select(max(${m}, ${value}), ${value}, k_isnan(${value})), ${m}, k_isnan(${m}));`,
    );
  }

  /** The private variable holding combined output `k`'s largest value so far. */
  largest(k: number): string {
    return `${this.outputs[k]}_max`;
  }

  /**
   * Assigns the coordinates of `axes` (row-major) from the linear `index` (never negative), divided
   * as u32s for the reason `applySteps` gives.
   */
  unravel(axes: readonly number[], index: string): void {
    const space = this.kernel.space;
    let rest = index;
    for (let j = axes.length - 1; j >= 0; j--) {
      // An empty axis has no points to unravel (Tint refuses a remainder by 0 as a constant).
      const d = space[axes[j]];
      this.e.line(`${this.coords[axes[j]]} = ${d <= 1 ? "0" : `i32(u32(${rest}) % ${d}u)`};`);
      if (j > 0 && d > 1) {
        const next = this.e.fresh("q");
        this.e.line(`let ${next} = i32(u32(${rest}) / ${d}u);`);
        rest = next;
      }
    }
  }
}
