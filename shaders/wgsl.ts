/**
 * WGSL generation from the kernel IR. An elementwise kernel runs one invocation per point; a
 * kernel with reductions runs one workgroup per row, whose threads stride over the row's reduced
 * coordinates and combine through workgroup memory, then store row outputs once and full outputs
 * strided across the workgroup.
 * Index steps become integer arithmetic with constants baked in; every subexpression is a named
 * `let`, emitted once per point, so the generated source is readable and shared work is not
 * repeated.
 *
 * Storage is 32-bit words: f32/f16 as f32, i32/i8 as i32, u32/u8/bool as u32 (the backend widens
 * on upload and narrows on download). After every ALU op the value is re-rounded to its dtype
 * (f16 through pack2x16float, i8/u8 by wrapping, bool to 0/1), exactly the IR's semantics.
 *
 * @module
 */
import type { DType } from "../jit/dtype.ts";
import {
  type Expr,
  type IndexStep,
  type KernelIR,
  type MatmulOperands,
  matmulOperands,
} from "../jit/kernel_ir.ts";
import { type Shape, sizeOf, stridesOf } from "../jit/shape.ts";

/** Invocations per workgroup of generated kernels. */
export const WORKGROUP_SIZE = 64;

/**
 * The dispatch for `rows` rows of `kernel` (fewer than all under shape buckets): tiled matmuls
 * take (column tiles, row tiles, batch); others a count folded past 65535 per dimension — one
 * workgroup per row when the kernel reduces, one invocation per point otherwise.
 */
export function dispatchSize(kernel: KernelIR, rows: number): [number, number, number] {
  const tile = tiledMatmul(kernel);
  if (tile) {
    const perBatch = tile.m * tile.n;
    const batches = Math.ceil(rows / perBatch);
    const m = tile.nb > 0 ? tile.m : Math.ceil(rows / tile.n);
    return [Math.ceil(tile.n / 64), Math.ceil(m / 64), Math.max(1, batches)];
  }
  const groups = kernel.reductions.length ? rows : Math.ceil(rows / WORKGROUP_SIZE);
  return groups <= 65535 ? [groups, 1, 1] : [65535, Math.ceil(groups / 65535), 1];
}

/** Smallest batch·M·N·K that uses the tiled matmul kernel. */
export const TILE_THRESHOLD: number = 1 << 24;

/** Fewest 64×64 output tiles that use the tiled matmul kernel. */
export const MIN_TILES = 32;

/** The tiling of an f32 matmul kernel (plain-load operands, per-row outputs, large enough), if any. */
export function tiledMatmul(kernel: KernelIR): MatmulOperands | undefined {
  const operands = matmulOperands(kernel);
  if (!operands) return undefined;
  const { nb, m, n, k } = operands;
  const batch = kernel.space.slice(0, nb).reduce((x, y) => x * y, 1);
  if (batch > 65535) return undefined;
  // Tiles pay off on large products only: on small ones most of a 64×64 tile's threads idle, and
  // the more complex shader costs seconds to compile on software adapters. Too few tiles leave a
  // large GPU idle (64×784·784×512 made 8 and ran 1.4× slower than one workgroup per output).
  if (
    batch * m * n * k < TILE_THRESHOLD || batch * Math.ceil(m / 64) * Math.ceil(n / 64) < MIN_TILES
  ) return undefined;
  return operands;
}

/** The WGSL scalar type that holds a dtype. */
export function wgslType(dtype: DType): "f32" | "i32" | "u32" {
  return dtype === "f32" || dtype === "f16"
    ? "f32"
    : dtype === "i32" || dtype === "i8"
    ? "i32"
    : "u32";
}

const PRELUDE = `
// Dawn's Tint rejects a constant expression whose value is NaN or ±inf, so non-finite floats are
// bitcast from bits held in a private variable, which is not a constant expression.
var<private> k_special: vec3<u32> = vec3<u32>(0x7fc00000u, 0x7f800000u, 0xff800000u);
fn k_isnan(x: f32) -> bool { return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u; }
fn k_f16(x: f32) -> f32 { return unpack2x16float(pack2x16float(vec2<f32>(x, 0.0))).x; }
fn k_erf(x: f32) -> f32 {
  // Abramowitz & Stegun 7.1.26 in the odd form; |error| < 1.5e-7.
  let a = abs(x);
  let t = 1.0 / (1.0 + 0.3275911 * a);
  let y = 1.0 - (((((1.061405429 * t - 1.453152027) * t) + 1.421413741) * t - 0.284496736) * t + 0.254829592) * t * exp(-a * a);
  return select(sign(x) * y, x, k_isnan(x));
}
fn k_pow(a: f32, b: f32) -> f32 {
  if (b == 0.0) { return 1.0; }
  if (k_isnan(a) || k_isnan(b)) { return bitcast<f32>(k_special.x); }
  if (a == 0.0) { return select(bitcast<f32>(k_special.y), 0.0, b > 0.0); }
  let r = exp2(b * log2(abs(a)));
  if (a > 0.0) { return r; }
  if (b != trunc(b)) { return bitcast<f32>(k_special.x); }
  return select(r, -r, abs(b % 2.0) == 1.0);
}
fn k_round(x: f32) -> f32 { return round(x); }
// WGSL leaves a runtime float division by zero indeterminate; IEEE gives ±inf or NaN.
fn k_fdiv(a: f32, b: f32) -> f32 {
  if (b != 0.0) { return a / b; }
  if (k_isnan(a) || a == 0.0) { return bitcast<f32>(k_special.x); }
  let negative = (a < 0.0) != ((bitcast<u32>(b) & 0x80000000u) != 0u);
  return select(bitcast<f32>(k_special.y), bitcast<f32>(k_special.z), negative);
}
fn k_f2i(x: f32, lo: i32, hi: i32) -> i32 {
  if (k_isnan(x)) { return 0; }
  if (x >= 2147483648.0) { return hi; }
  if (x < -2147483648.0) { return lo; }
  return clamp(i32(trunc(x)), lo, hi);
}
fn k_f2u(x: f32, hi: u32) -> u32 {
  if (k_isnan(x) || x <= 0.0) { return 0u; }
  if (x >= 4294967296.0) { return hi; }
  return min(u32(trunc(x)), hi);
}
`;

const NAN = "bitcast<f32>(k_special.x)";
const INF = "bitcast<f32>(k_special.y)";
const NEG_INF = "bitcast<f32>(k_special.z)";

/** A literal of `value` in the WGSL type of `dtype`. */
function literal(value: number, dtype: DType): string {
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
function rounded(x: string, dtype: DType): string {
  switch (dtype) {
    case "f16":
      return `k_f16(${x})`;
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

/** WGSL for one ALU op over argument expressions `a` of dtypes `d`, producing `out`. */
function alu(
  op: string,
  a: string[],
  d: DType[],
  out: DType,
  attrs: Record<string, unknown> | undefined,
): string {
  const t = wgslType(d[0] ?? out);
  const int = t !== "f32";
  const flag = (cond: string) => `select(0u, 1u, ${cond})`;
  switch (op) {
    case "Add":
      return `(${a[0]} + ${a[1]})`;
    case "Sub":
      return `(${a[0]} - ${a[1]})`;
    case "Mul":
      return `(${a[0]} * ${a[1]})`;
    case "Div":
      return int
        ? `select(${a[0]} / ${a[1]}, ${literal(0, d[0])}, ${a[1]} == ${literal(0, d[0])})`
        : `k_fdiv(${a[0]}, ${a[1]})`;
    case "Pow":
      return int ? `${t}(round(k_pow(f32(${a[0]}), f32(${a[1]}))))` : `k_pow(${a[0]}, ${a[1]})`;
    case "Mod": {
      if (!int) return `(${a[0]} % ${a[1]})`;
      const zero = literal(0, d[0]);
      const den = `select(${a[1]}, ${literal(1, d[0])}, ${a[1]} == ${zero})`;
      if (attrs?.fmod === 1) {
        return `select(${a[0]} - ${den} * (${a[0]} / ${den}), ${zero}, ${a[1]} == ${zero})`;
      }
      // a - b·(a / b), not %: a software driver seen here computes signed % as unsigned.
      const safe = `select(${a[1]}, ${literal(1, d[0])}, ${a[1]} == ${zero})`;
      const r = `(${a[0]} - ${safe} * (${a[0]} / ${safe}))`;
      const fix = t === "i32"
        ? `select(${r}, ${r} + ${a[1]}, ${r} != 0 && ((${r} < 0) != (${a[1]} < 0)))`
        : r;
      return `select(${fix}, ${zero}, ${a[1]} == ${zero})`;
    }
    case "Equal":
      return flag(`${a[0]} == ${a[1]}`);
    case "Greater":
      return flag(`${a[0]} > ${a[1]}`);
    case "Less":
      return flag(`${a[0]} < ${a[1]}`);
    case "And":
      return flag(`${a[0]} != 0u && ${a[1]} != 0u`);
    case "Or":
      return flag(`${a[0]} != 0u || ${a[1]} != 0u`);
    case "Not":
      return flag(`${a[0]} == 0u`);
    case "Where":
      return `select(${a[2]}, ${a[1]}, ${a[0]} != 0u)`;
    case "Neg":
      return `(-${a[0]})`;
    case "Abs":
      return `abs(${a[0]})`;
    case "Sqrt":
    case "Exp":
    case "Log":
    case "Sin":
    case "Cos":
    case "Floor":
    case "Ceil":
      return `${op.toLowerCase()}(${a[0]})`;
    case "Round":
      return `k_round(${a[0]})`;
    case "Erf":
      return `k_erf(${a[0]})`;
    case "IsNaN":
      return flag(`k_isnan(${a[0]})`);
    case "Cast":
      return cast(a[0], d[0], out);
  }
  throw new Error(`WGSL: no lowering for ALU op ${op}`);
}

/** Casts follow the reference: truncate and saturate into integers, NaN → 0, bool is x != 0. */
function cast(x: string, from: DType, to: DType): string {
  const tt = wgslType(to), ft = wgslType(from);
  if (to === "bool") return `select(0u, 1u, ${x} != ${literal(0, from)})`;
  if (tt === "f32") return `f32(${x})`;
  const hiU = to === "u8" ? 255 : 4294967295;
  const [lo, hi] = to === "i8" ? [-128, 127] : [-2147483648, 2147483647];
  if (ft === "f32") {
    return tt === "i32" ? `k_f2i(${x}, ${literal(lo, "i32")}, ${hi})` : `k_f2u(${x}, ${hiU}u)`;
  }
  if (ft === "i32") {
    return tt === "i32"
      ? `clamp(${x}, ${literal(lo, "i32")}, ${hi})`
      : `u32(clamp(${x}, 0, ${Math.min(hiU, 2147483647)}))`;
  }
  return tt === "i32" ? `i32(min(${x}, ${hi}u))` : `min(${x}, ${hiU}u)`;
}

/** Generates readable statements, one `let` per value. */
class Emitter {
  lines: string[] = [];
  #n = 0;
  indent = "  ";
  fresh(prefix: string): string {
    return `${prefix}${this.#n++}`;
  }
  line(s: string): void {
    this.lines.push(this.indent + s);
  }
}

/** A bounds check of one step and the value a load yields when it fails. */
interface Guard {
  readonly ok: string;
  readonly fill: number;
}

/** The coordinate expressions after applying `steps` to `coords`, with each step's bounds check. */
function applySteps(
  e: Emitter,
  steps: readonly IndexStep[],
  coords: string[],
): { coords: string[]; guards: Guard[] } {
  let c = coords;
  const guards: Guard[] = [];
  for (const s of steps) {
    if (s.kind === "reshape") {
      const lin = e.fresh("lin");
      const from = stridesOf(s.from);
      e.line(
        `let ${lin} = ${
          c.map((x, i) => (s.from[i] === 1 ? "" : `${x} * ${from[i]}`)).filter(Boolean).join(
            " + ",
          ) || "0"
        };`,
      );
      const to = stridesOf(s.to);
      c = s.to.map((d, i) => (d === 1 ? "0" : `((${lin} / ${to[i]}) % ${d})`));
      continue;
    }
    const out = s.coeff.map((row, j) => {
      const terms = row.flatMap((w, d) => (w === 0 ? [] : [w === 1 ? c[d] : `${c[d]} * ${w}`]));
      if (s.offset[j] !== 0 || !terms.length) terms.push(String(s.offset[j]));
      const name = e.fresh("c");
      e.line(`let ${name} = ${terms.join(" + ")};`);
      return name;
    });
    if (s.bounds) {
      const ok = e.fresh("ok");
      e.line(
        `let ${ok} = ${
          out.map((x, j) => `${x} >= 0 && ${x} < ${s.bounds![j]}`).join(" && ") || "true"
        };`,
      );
      guards.push({ ok, fill: s.fill ?? 0 });
    }
    c = out;
  }
  return { coords: c, guards };
}

function linear(coords: string[], shape: Shape): string {
  const strides = stridesOf(shape);
  return coords.map((x, i) => (shape[i] === 1 ? "" : strides[i] === 1 ? x : `${x} * ${strides[i]}`))
    .filter(Boolean).join(" + ") || "0";
}

/** Generates the WGSL compute shader for `kernel` (not for opaque kernels). */
export function generateWgsl(kernel: KernelIR): string {
  if (kernel.opaque) throw new Error(`WGSL: opaque kernel ${kernel.name} has no generated form`);
  const e = new Emitter();
  const space = kernel.space;
  const kept = space.flatMap((_, i) => (kernel.reduced.includes(i) ? [] : [i]));
  const red = kernel.reduced;
  const rows = sizeOf(kept.map((i) => space[i]));
  const inner = sizeOf(red.map((i) => space[i]));
  const coord = space.map((_, i) => `x${i}`);

  /** Emits `expr` at the current point; `memo` shares values within the point. */
  const value = (expr: Expr, memo: Map<Expr, string>): string => {
    const hit = memo.get(expr);
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
        const buf = kernel.inputs[expr.input];
        const { coords, guards } = applySteps(e, expr.steps, coord);
        const index = linear(coords, buf.shape);
        if (guards.length) {
          // The first failing step decides the fill, as in the interpreter; reads stay in range.
          const all = guards.map((g) => g.ok).join(" && ");
          code = `in${expr.input}[u32(select(0, ${index}, ${all}))]`;
          for (const g of [...guards].reverse()) {
            code = `select(${literal(g.fill, expr.dtype)}, ${code}, ${g.ok})`;
          }
        } else {
          code = `in${expr.input}[u32(${index})]`;
        }
        break;
      }
      case "alu": {
        const args = expr.args.map((a) => value(a, memo));
        code = rounded(
          alu(
            expr.op,
            args,
            expr.args.map((a) => a.dtype),
            expr.dtype,
            expr.attrs as Record<string, unknown>,
          ),
          expr.dtype,
        );
        break;
      }
    }
    const name = e.fresh("v");
    e.line(`let ${name}: ${wgslType(expr.dtype)} = ${code};`);
    memo.set(expr, name);
    return name;
  };

  const unravel = (axes: readonly number[], index: string) => {
    let rest = index;
    for (let j = axes.length - 1; j >= 0; j--) {
      const d = space[axes[j]];
      e.line(`${coord[axes[j]]} = ${d === 1 ? "0" : `${rest} % ${d}`};`);
      if (j > 0) {
        const next = e.fresh("q");
        e.line(`let ${next} = ${rest} / ${d};`);
        rest = next;
      }
    }
  };
  const store = (o: KernelIR["outputs"][number], k: number, memo: Map<Expr, string>) => {
    const v = value(o.expr, memo);
    const { coords } = applySteps(e, o.steps, coord);
    e.line(`out${k}[u32(${linear(coords, o.shape)})] = ${v};`);
  };

  const tile = tiledMatmul(kernel);
  if (tile) {
    // Tiled matmul: a 16×16 workgroup computes a 64×64 output tile, 4×4 per thread, stepping K
    // by 16 through workgroup memory. Operand tiles are read with the generic index-map code, so
    // transposed or broadcast operands work unchanged; the fused epilogue runs per output.
    const { nb, m: M, n: N, k: K, a, b: bOp } = tile;
    const [mAx, nAx, kAx] = [nb, nb + 1, nb + 2];
    for (const c of coord) e.line(`var ${c}: i32 = 0;`);
    e.line("let t = i32(lid.y * 16u + lid.x);");
    e.line("let m0 = i32(wid.y) * 64;");
    e.line("let n0 = i32(wid.x) * 64;");
    unravel(coord.slice(0, nb).map((_, i) => i), "i32(wid.z)");
    e.line("var acc: array<f32, 16>;");
    e.line(`for (var k0 = 0; k0 < ${K}; k0 += 16) {`);
    e.indent += "  ";
    e.line("for (var j = 0; j < 4; j++) {");
    e.indent += "  ";
    e.line("let ia = t + j * 256;");
    e.line(`${coord[mAx]} = m0 + ia / 16; ${coord[nAx]} = 0; ${coord[kAx]} = k0 + ia % 16;`);
    e.line(`if (${coord[mAx]} < ${M} && ${coord[kAx]} < ${K}) {`);
    e.line(`  tileA[ia] = ${value(a, new Map())};`);
    e.line("} else { tileA[ia] = 0.0; }");
    e.line("let ib = t + j * 256;");
    e.line(`${coord[mAx]} = 0; ${coord[nAx]} = n0 + ib % 64; ${coord[kAx]} = k0 + ib / 64;`);
    e.line(`if (${coord[nAx]} < ${N} && ${coord[kAx]} < ${K}) {`);
    e.line(`  tileB[ib] = ${value(bOp, new Map())};`);
    e.line("} else { tileB[ib] = 0.0; }");
    e.indent = e.indent.slice(2);
    e.line("}");
    e.line("workgroupBarrier();");
    e.line("for (var kk = 0; kk < 16; kk++) {");
    e.line("  var av: array<f32, 4>;");
    e.line("  for (var i = 0; i < 4; i++) { av[i] = tileA[(i32(lid.y) * 4 + i) * 16 + kk]; }");
    e.line("  for (var jj = 0; jj < 4; jj++) {");
    e.line("    let bv = tileB[kk * 64 + i32(lid.x) * 4 + jj];");
    e.line("    for (var i = 0; i < 4; i++) { acc[i * 4 + jj] = acc[i * 4 + jj] + av[i] * bv; }");
    e.line("  }");
    e.line("}");
    e.line("workgroupBarrier();");
    e.indent = e.indent.slice(2);
    e.line("}");
    e.line("for (var i = 0; i < 4; i++) {");
    e.line("  for (var jj = 0; jj < 4; jj++) {");
    e.indent += "    ";
    e.line(
      `${coord[mAx]} = m0 + i32(lid.y) * 4 + i; ${coord[nAx]} = n0 + i32(lid.x) * 4 + jj; ${
        coord[kAx]
      } = 0;`,
    );
    e.line(`if (${coord[mAx]} < ${M} && ${coord[nAx]} < ${N}) {`);
    e.indent += "  ";
    e.line("let acc0 = acc[i * 4 + jj];");
    const memo = new Map<Expr, string>();
    kernel.outputs.forEach((o, k) => store(o, k, memo));
    e.indent = e.indent.slice(2);
    e.line("}");
    e.indent = e.indent.slice(4);
    e.line("  }");
    e.line("}");
  }
  const shared = new Set<string>();
  if (!tile) {
    // Elementwise kernels: one invocation per point. Kernels with reductions: one workgroup per
    // row; its threads stride over the reduced coordinates and combine in workgroup memory (long
    // serial loops are slow on GPUs, and some drivers cap a loop's iterations).
    const grouped = kernel.reductions.length > 0;
    const stride = grouped ? WORKGROUP_SIZE : 1;
    const start = grouped ? "i32(lid.x)" : "0";
    if (grouped) e.line(`let row = i32(wid.x + wid.y * nwg.x);`);
    else e.line(`let row = i32(gid.x + gid.y * nwg.x * ${WORKGROUP_SIZE}u);`);
    e.line(`if (row >= ${rows}) { return; }`);
    for (const c of coord) e.line(`var ${c}: i32 = 0;`);
    unravel(kept, "row");
    kernel.reductions.forEach((r, k) => {
      const t = wgslType(r.dtype);
      const init = r.op === "max"
        ? (t === "f32" ? NEG_INF : literal(t === "i32" ? -2147483648 : 0, r.dtype))
        : r.op === "min"
        ? (t === "f32" ? INF : literal(t === "i32" ? 2147483647 : 4294967295, r.dtype))
        : literal(0, r.dtype);
      const combine = (acc: string, v: string) => {
        if (r.op === "sum" || r.op === "mean") return `${acc} + ${v}`;
        const cmp = r.op === "max" ? ">=" : "<=";
        const nan = t === "f32" ? `k_isnan(${acc}) || ` : "";
        return `select(${v}, ${acc}, ${nan}${acc} ${cmp} ${v})`;
      };
      e.line(`var acc${k}: ${t} = ${init};`);
      e.line(`for (var i: i32 = ${start}; i < ${inner}; i += ${stride}) {`);
      e.indent += "  ";
      unravel(red, "i");
      const v = value(r.expr, new Map());
      e.line(`acc${k} = ${combine(`acc${k}`, v)};`);
      e.indent = e.indent.slice(2);
      e.line("}");
      shared.add(t);
      e.line(`sh_${t}[lid.x] = acc${k};`);
      e.line("workgroupBarrier();");
      e.line(`for (var s = ${WORKGROUP_SIZE / 2}u; s > 0u; s = s >> 1u) {`);
      e.line(
        `  if (lid.x < s) { sh_${t}[lid.x] = ${combine(`sh_${t}[lid.x]`, `sh_${t}[lid.x + s]`)}; }`,
      );
      e.line("  workgroupBarrier();");
      e.line("}");
      e.line(`acc${k} = sh_${t}[0];`);
      e.line("workgroupBarrier();");
      if (r.op === "mean") {
        e.line(
          inner === 0 && t === "f32"
            ? `acc${k} = ${NAN};`
            : `acc${k} = acc${k} / ${t}(${Math.max(inner, 1)});`,
        );
      }
      e.line(`acc${k} = ${rounded(`acc${k}`, r.dtype)};`);
    });
    const rowOuts = kernel.outputs.map((o, k) => [o, k] as const).filter(([o]) =>
      o.level === "row"
    );
    const fullOuts = kernel.outputs.map((o, k) => [o, k] as const).filter(([o]) =>
      o.level === "full"
    );
    if (rowOuts.length) {
      e.line(grouped ? "if (lid.x == 0u) {" : "{");
      for (const a of red) e.line(`  ${coord[a]} = 0;`);
      const memo = new Map<Expr, string>();
      e.indent += "  ";
      for (const [o, k] of rowOuts) store(o, k, memo);
      e.indent = e.indent.slice(2);
      e.line("}");
    }
    if (fullOuts.length) {
      e.line(`for (var i: i32 = ${start}; i < ${inner}; i += ${stride}) {`);
      e.indent += "  ";
      unravel(red, "i");
      const memo = new Map<Expr, string>();
      for (const [o, k] of fullOuts) store(o, k, memo);
      e.indent = e.indent.slice(2);
      e.line("}");
    }
  }
  const bindings = [
    ...kernel.inputs.map((b, i) =>
      `@group(0) @binding(${i}) var<storage, read> in${i}: array<${wgslType(b.dtype)}>;`
    ),
    ...kernel.outputs.map((b, k) =>
      `@group(0) @binding(${kernel.inputs.length + k}) var<storage, read_write> out${k}: array<${
        wgslType(b.dtype)
      }>;`
    ),
  ];
  return [
    `// kiln kernel ${kernel.name}: ${kernel.ops.join(" | ")}`,
    ...bindings,
    PRELUDE,
    ...[...shared].map((t) => `var<workgroup> sh_${t}: array<${t}, ${WORKGROUP_SIZE}>;`),
    ...(tile
      ? ["var<workgroup> tileA: array<f32, 1024>;", "var<workgroup> tileB: array<f32, 1024>;"]
      : []),
    tile ? "@compute @workgroup_size(16, 16)" : `@compute @workgroup_size(${WORKGROUP_SIZE})`,
    "fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,",
    "        @builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {",
    ...e.lines,
    "}",
    "",
  ].join("\n");
}
