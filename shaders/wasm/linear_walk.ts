/**
 * The walks of the WebAssembly generator's linear path (see `linear.ts`): which accesses are
 * linear, base addresses and strides, values of four consecutive points, and stores along a
 * walk. The reductions and outputs built on them are in `linear.ts`.
 *
 * @module
 */
import {
  type AffineOffset,
  affineOffset,
  type GuardedOffset,
  guardedOffset,
  strideOver,
} from "../../jit/ir/access.ts";
import type { Expr } from "../../jit/ir/kernel_ir.ts";
import { walk } from "../../jit/ir/kernel_ir.ts";
import { sizeOf } from "../../jit/ir/shape.ts";
import type { DType } from "../../jit/ir/dtype.ts";
import { isFloat, type Memo } from "./alu.ts";
import type { Load } from "../../jit/ir/kernel_ir.ts";
import type { KernelFunction } from "./module.ts";
import { type Accesses, type Linear, spreadLoad, type Walk, walkAt } from "./walk.ts";
import { outputAddress } from "./padded.ts";

/** What the pieces of the linear path share: the function being built and its kernel. */
export function linearLoweringState(fn: KernelFunction) {
  const { m, wasm, kernel, coord, bufferOf, local, get, ic, whileLoop } = fn;
  const { keyOf, accs } = fn;
  const { value, wideSum, accumulate } = fn;
  const { loadAddress } = fn.index;
  const { vectorKind, valu, lanes } = fn.ops;
  const { start, end } = fn.params;
  const i32 = wasm.i32, f32 = wasm.f32, f64 = wasm.f64;
  const v128 = wasm.v128, f4 = m.f32x4;
  const space = kernel.space, red = kernel.reduced, inner = sizeOf(red.map((i) => space[i]));
  const at = (w: Walk, j: number, lane = 0) => walkAt(fn, w, j, lane);
  return {
    fn,
    m,
    wasm,
    kernel,
    coord,
    bufferOf,
    local,
    get,
    ic,
    whileLoop,
    keyOf,
    accs,
    value,
    wideSum,
    accumulate,
    loadAddress,
    vectorKind,
    valu,
    lanes,
    start,
    end,
    i32,
    f32,
    f64,
    v128,
    f4,
    space,
    red,
    inner,
    at,
  };
}

/** The shared state of the linear path (see `linearLowering`). */
export type Lin = ReturnType<typeof linearLoweringState>;

export function accessesOf(
  L: Lin,
  exprs: readonly Expr[],
  outs: readonly number[],
  uniform?: readonly number[],
): Accesses | undefined {
  const { fn, kernel, bufferOf, space } = L;
  // Walks step 32-bit elements: f64 kernels keep the per-element path.
  if (fn.wide) return undefined;
  const found = new Set<Load>();
  for (const e of exprs) walk(e, (x) => x.kind === "load" && found.add(x));
  const loads: [Load, AffineOffset][] = [];
  const guarded = new Map<Load, GuardedOffset>();
  for (const l of found) {
    const shape = bufferOf(l.input).shape;
    const a = affineOffset(l.steps, space, shape);
    if (a) {
      loads.push([l, a]);
      continue;
    }
    // A Concat's part read at a row's coordinates (ViT's class token before its patches):
    // the row is in its bounds or not as a whole, so it is walked like any other buffer.
    const g = uniform && guardedOffset(l.steps, space, shape);
    if (!g || g.guards.some((x) => uniform!.some((axis) => x.at.weights[axis] !== 0))) {
      return undefined;
    }
    loads.push([l, g.offset]);
    guarded.set(l, g);
  }
  const stores: [number, AffineOffset][] = [];
  for (const k of outs) {
    const a = affineOffset(kernel.outputs[k].steps, space, kernel.outputs[k].shape);
    if (!a) return undefined;
    stores.push([k, a]);
  }
  return guarded.size ? { loads, stores, guarded } : { loads, stores };
}

export function linearOver(L: Lin, acc: Accesses, group: readonly number[]): boolean {
  const { space } = L;
  return [...acc.loads, ...acc.stores].every(([, a]) => strideOver(a, group, space) !== undefined);
}

/** Base addresses at the current coordinates (statements into `stmts`). */
export function walks(L: Lin, acc: Accesses, group: readonly number[], stmts: number[]): Linear {
  const { fn, m, local, get, ic, loadAddress, i32, space } = L;
  const guards = new Map<Expr, { ok: number; fill: number }>();
  const lin: Linear = { j: local(i32), loads: new Map(), stores: new Map(), guards };
  for (const [l, a] of acc.loads) {
    const base = local(i32);
    // loadAddress evaluates a load's guards at the walk's start (a guarded load's hold or fail
    // along the whole walk), and points the load at its buffer's start where they fail.
    const address = loadAddress(l, stmts);
    stmts.push(m.local.set(base, address.address));
    lin.loads.set(l, { base, stride: strideOver(a, group, space)! });
    const g = acc.guarded?.get(l);
    if (!g) continue;
    const ok = local(i32);
    const all = address.guards.reduce((x, c) => m.i32.and(x, get(c.ok, i32)), ic(1));
    stmts.push(m.local.set(ok, all));
    guards.set(l, { ok, fill: g.fill });
  }
  for (const [k, a] of acc.stores) {
    const base = local(i32);
    stmts.push(m.local.set(base, outputAddress(fn, k, stmts)));
    lin.stores.set(k, { base, stride: strideOver(a, group, space)! });
  }
  return lin;
}

/**
 * Whether values `exprs`, stored as outputs `outs` (one each), have a lowering of four lanes: f32
 * lanes for floats, i32 lanes for the integers the arena holds as words (a quantization's u8, its
 * zero-point-shifted i16), a lane mask for bools.
 */
export function vectorizable(L: Lin, exprs: readonly Expr[], outs: readonly number[]): boolean {
  const { kernel, vectorKind } = L;
  return outs.every((k, i) => vectorKind(exprs[i]) === lanesOf(kernel.outputs[k].dtype));
}

/** The vector kind a value of `dtype` is stored from. */
function lanesOf(dtype: DType): "f32" | "i32" | "mask" {
  return dtype === "bool" ? "mask" : isFloat(dtype) ? "f32" : "i32";
}

/** Evaluates `expr` for four consecutive points of a linear walk. */
export function vvalue(L: Lin, expr: Expr, lin: Linear, memo: Memo, stmts: number[]): number {
  const { fn, m, local, get, ic, keyOf, accs, valu, lanes, i32, f32, v128, f4, at } = L;
  const hit = memo.get(keyOf(expr));
  if (hit !== undefined) return get(hit, v128);
  const invariant = lin.hoisted?.get(keyOf(expr));
  if (invariant !== undefined) return f4.splat(get(invariant, f32));
  let code: number;
  switch (expr.kind) {
    case "const":
      return expr.dtype === "bool"
        ? m.i32x4.splat(ic(expr.value ? -1 : 0))
        : isFloat(expr.dtype)
        ? f4.splat(m.f32.const(expr.value))
        : m.i32x4.splat(ic(expr.value));
    case "acc":
      if (lin.acc) return m.v128.load(0, 4, at(lin.acc, lin.j));
      return isFloat(expr.dtype)
        ? f4.splat(get(accs[expr.index], f32))
        : m.i32x4.splat(get(accs[expr.index], i32));
    case "load": {
      const w = lin.loads.get(expr)!;
      // Four windows at a row's end: the lanes outside the padding read the fill, one by one.
      // A stride of 0 (a value broadcast along the walk) is one load, splatted.
      const edge = lin.lanes?.get(expr);
      // Bool and integer lanes are i32 words (bools 0/1, made a mask below).
      const bool = expr.dtype === "bool", words = !isFloat(expr.dtype);
      const one = (l: number) =>
        words ? m.i32.load(0, 4, at(w, lin.j, l)) : m.f32.load(0, 4, at(w, lin.j, l));
      const four = words
        ? (f: (l: number) => number) =>
          [1, 2, 3].reduce((v, l) => m.i32x4.replace_lane(v, l, f(l)), m.i32x4.splat(f(0)))
        : lanes;
      code = edge
        ? four((l) => edge.lanes[l] ? one(l) : words ? ic(edge.fill) : m.f32.const(edge.fill))
        : w.stride === 1
        ? m.v128.load(0, 4, at(w, lin.j))
        : w.stride === 0
        ? (words ? m.i32x4.splat(one(0)) : f4.splat(one(0)))
        : w.stride === 2 || w.stride === 3
        ? spreadLoad(fn, w.stride, at(w, lin.j), stmts)
        : four(one);
      // A padded tap whose guard holds or fails along the whole walk (see `vectorWindows`):
      // where it fails, the fill, and no load (the walk may point outside the buffer).
      const guard = lin.guards?.get(expr);
      if (guard) {
        const fill = expr.dtype === "f32"
          ? f4.splat(m.f32.const(guard.fill))
          : m.i32x4.splat(ic(guard.fill));
        code = m.if(get(guard.ok, i32), code, fill);
      }
      // Bool words are 0 or 1; a lane mask is all ones or zeros.
      if (bool) code = m.i32x4.neg(code);
      break;
    }
    case "alu":
      for (const a of expr.args) vvalue(L, a, lin, memo, stmts);
      code = valu(expr, (i) => vvalue(L, expr.args[i], lin, memo, stmts));
      break;
  }
  const l = local(v128);
  stmts.push(m.local.set(l, code));
  memo.set(keyOf(expr), l);
  return get(l, v128);
}

/** Stores output `k` for one (`width` 1) or four points of a linear walk. */
export function storeLinear(
  L: Lin,
  k: number,
  width: 1 | 4,
  lin: Linear,
  memo: Memo,
  stmts: number[],
  expr: Expr = L.kernel.outputs[k].expr,
): void {
  const { m, kernel, local, get, ic, value, i32, v128, f4, at } = L;
  const o = kernel.outputs[k], w = lin.stores.get(k)!;
  if (width === 1) {
    const v = value(expr, memo, stmts, lin);
    const address = at(w, lin.j);
    stmts.push(isFloat(o.dtype) ? m.f32.store(0, 4, address, v) : m.i32.store(0, 4, address, v));
    return;
  }
  let v = vvalue(L, expr, lin, memo, stmts);
  if (o.dtype === "bool") v = m.v128.and(v, m.i32x4.splat(ic(1)));
  const words = !isFloat(o.dtype);
  if (w.stride === 1) stmts.push(m.v128.store(0, 4, at(w, lin.j), v));
  else {
    const t = local(v128);
    stmts.push(m.local.set(t, v));
    // One address, the lanes at constant offsets from it (a conv's NCHW output: its channels
    // a plane apart along the tile's columns).
    const forward = w.stride > 0, address = forward ? local(i32) : -1;
    if (forward) stmts.push(m.local.set(address, at(w, lin.j)));
    const store = words ? m.i32.store : m.f32.store;
    for (let l = 0; l < 4; l++) {
      const lane = words ? m.i32x4.extract_lane(get(t, v128), l) : f4.extract_lane(get(t, v128), l);
      stmts.push(
        forward
          ? store(4 * w.stride * l, 4, get(address, i32), lane)
          : store(0, 4, at(w, lin.j, l), lane),
      );
    }
  }
}

/**
 * Evaluates, before a loop, the largest f32 subexpressions of `exprs` that read no buffer (they
 * depend on reductions and constants only: LayerNorm's `sqrt(var + eps)`), for `lin` to reuse.
 */
export function hoist(L: Lin, lin: Linear, exprs: readonly Expr[], stmts: number[]): Linear {
  const { m, local, keyOf, value, f32 } = L;
  const hoisted: Memo = new Map(), memo: Memo = new Map();
  // Memoized by node: a shared subexpression is looked at once, not once per path to it.
  const pure = new Map<Expr, boolean>(), seen = new Set<Expr>();
  const readsNothing = (e: Expr): boolean => {
    let r = pure.get(e);
    if (r === undefined) {
      r = e.kind === "alu" ? e.args.every(readsNothing) : e.kind !== "load";
      pure.set(e, r);
    }
    return r;
  };
  const visit = (e: Expr) => {
    if (e.kind !== "alu" || seen.has(e) || hoisted.has(keyOf(e))) return;
    seen.add(e);
    if (e.dtype === "f32" && readsNothing(e)) {
      const l = local(f32);
      stmts.push(m.local.set(l, value(e, memo, stmts)));
      hoisted.set(keyOf(e), l);
    } else e.args.forEach(visit);
  };
  exprs.forEach(visit);
  return { ...lin, hoisted };
}

/** `count` points of a linear walk: four at a time while they fit (if `vector`), then one. */
export function linearLoop(
  L: Lin,
  lin: Linear,
  count: () => number,
  vector: ((stmts: number[]) => void) | undefined,
  scalar: (stmts: number[]) => void,
): number[] {
  const { m, get, ic, whileLoop, i32 } = L;
  const j = () => get(lin.j, i32);
  const run = (width: number, fill: (stmts: number[]) => void) => {
    const stmts: number[] = [];
    fill(stmts);
    return whileLoop(
      () => width === 1 ? m.i32.lt_s(j(), count()) : m.i32.le_s(m.i32.add(j(), ic(width)), count()),
      [...stmts, m.local.set(lin.j, m.i32.add(j(), ic(width)))],
    );
  };
  return [m.local.set(lin.j, ic(0)), ...(vector ? [run(4, vector)] : []), run(1, scalar)];
}

/**
 * Stores outputs `outs` (the values `exprs`) at `count()` points of a linear walk, four at a
 * time where `vector`: one loop, or where many outputs walk streams of their own, a loop for
 * each group of them ({@linkcode streamGroups}).
 */
export function linearStores(
  L: Lin,
  lin: Linear,
  count: () => number,
  outs: readonly number[],
  vector: boolean,
  exprs: readonly Expr[] = outs.map((k) => L.kernel.outputs[k].expr),
): number[] {
  const each = (width: 1 | 4, group: readonly number[]) => (stmts: number[]) => {
    const memo = new Map<number, number>();
    for (const i of group) storeLinear(L, outs[i], width, lin, memo, stmts, exprs[i]);
  };
  return streamGroups(L, exprs).flatMap((group) =>
    linearLoop(L, lin, count, vector ? each(4, group) : undefined, each(1, group))
  );
}

/** Inputs of at most this many bytes stay in cache when each group of their readers reads them. */
const CACHED_BYTES = 1 << 16;

/** Operations cheaper to compute again in each loop than to share through one (a select's test). */
const CHEAP = new Set([
  "Add",
  "Sub",
  "Mul",
  "Neg",
  "Abs",
  "Min",
  "Max",
  "Cast",
  "Where",
  "Not",
  "And",
  "Or",
  "Equal",
  "Less",
  "LessOrEqual",
  "Greater",
  "GreaterOrEqual",
]);

/**
 * Whether `x` computes anything past {@linkcode CHEAP} operations (an activation, a division),
 * remembered in `known` (asked of the nodes outputs share).
 */
function costly(x: Expr, known: Map<Expr, boolean>): boolean {
  let found = known.get(x);
  if (found !== undefined) return found;
  found = false;
  walk(x, (y) => void (found ||= y.kind === "alu" && !CHEAP.has(y.op)));
  known.set(x, found);
  return found;
}

/** Groups of outputs from which each loops apart (fewer: one loop, sharing what they compute). */
const MANY_STREAMS = 8;

/**
 * The outputs (positions in `exprs`) in groups that each walk their own streams, where there are
 * {@linkcode MANY_STREAMS} or more: outputs that read an input of more than
 * {@linkcode CACHED_BYTES} in common, or share work ({@linkcode costly}), share a loop (it is
 * read or computed once); the others loop apart. One loop over a generation's 48 cache updates
 * (each a copy of its own past) walked 96 streams at once: 4.2 ms on one thread of the 2-core VM
 * for 6.3 MB, 0.37 ms in loops of their own. A few outputs (an LSTM cell's) keep one loop and the
 * work they share.
 */
function streamGroups(L: Lin, exprs: readonly Expr[]): number[][] {
  const owner = new Map<number, number>();
  const root = exprs.map((_, i) => i);
  const find = (i: number): number => (root[i] === i ? i : (root[i] = find(root[i])));
  const computed = new Map<Expr, number>(), cost = new Map<Expr, boolean>();
  exprs.forEach((e, i) =>
    walk(e, (x) => {
      if (x.kind === "alu") {
        const first = computed.get(x);
        // A node met again within one output joins nothing.
        if (first === undefined) computed.set(x, i);
        else if (first !== i && costly(x, cost)) root[find(i)] = find(first);
      }
      if (x.kind !== "load") return;
      const shape = L.bufferOf(x.input).shape;
      if (4 * sizeOf(shape) <= CACHED_BYTES) return;
      const first = owner.get(x.input);
      if (first === undefined) owner.set(x.input, i);
      else root[find(i)] = find(first);
    })
  );
  const groups = new Map<number, number[]>();
  exprs.forEach((_, i) => {
    const group = groups.get(find(i));
    if (group) group.push(i);
    else groups.set(find(i), [i]);
  });
  return groups.size >= MANY_STREAMS ? [...groups.values()] : [exprs.map((_, i) => i)];
}
