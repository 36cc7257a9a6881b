/**
 * The tiled WGSL matmul: a workgroup of `tx`×`ty` threads computes a TM×TN output tile, each
 * thread `pm`×`pn` outputs held in vec4 registers (TM = `ty`·`pm`, TN = `tx`·`pn`). K advances 16
 * at a time through workgroup memory laid out k-major as vec4s, so the inner loop reads
 * (`pm` + `pn`) / 4 vec4s for `pm`·`pn` FMAs; a thread's rows and columns are 4-wide groups a
 * tile-width apart, so the threads of a warp read consecutive vec4s. The next K step's operand
 * values are loaded into registers while the current step computes (one barrier pair a step);
 * the step's 16 K values are unrolled.
 * Operand tiles are filled through the generic index-map code (transposed, broadcast or batched
 * operands work unchanged), each thread walking the operand's contiguous axis so neighbouring
 * threads read neighbouring words; the fused epilogue is a helper function called per output.
 * Tile shapes go from 128×128 (256 threads) down to 32×32 (64 threads), the largest that still
 * gives the GPU enough workgroups (`tileShape`, `tile_shapes.ts`).
 *
 * @module
 */
import { affineOffset } from "../../jit/ir/access.ts";
import {
  byteContraction,
  byteProducts,
  byteSumDecls,
  byteSums,
  byteVector,
  packSlot,
} from "./byte_tiles.ts";
import {
  type Expr,
  gathers,
  type IndexStep,
  type KernelIR,
  type Load,
  mapLoads,
  type MatmulOperands,
  matmulOperands,
  walk,
} from "../../jit/ir/kernel_ir.ts";
import { sizeOf } from "../../jit/ir/shape.ts";
import { type KernelLowering, rounded } from "./expr.ts";
import { Emitter } from "./emit.ts";
import { quadAligned, readOnce } from "./quads.ts";
import { allOf } from "./prelude.ts";
import { type MatmulTile, tileOf, TK } from "./tile_shapes.ts";

/**
 * `kernel`, a matmul whose B ignores its last batch axes (shared weights), with those folded into
 * its rows: the space [...lead, ...folded, M, N, K] becomes [...lead, folded·M, N, K], every load
 * and store reached through a reshape back, so the rows tile together. ConvNeXt's MLPs over
 * [2, 4, 4, 768] were 8 products of 4 rows, each in a tile of 32 or more; a product split along K
 * (a leading batch axis B depends on) folds its images still. Unchanged where A's rows would then
 * not be an affine read (a transposed A), B depends on every batch axis, or a load gathers. Only
 * the GPU's tiler folds, where it was measured: folded in the IR for every backend,
 * transformer_block's wasm MLPs took 0.89 ms a run against 0.66 in one A/B on the 2-core VM
 * (medians of 3 processes).
 */
export function foldedRows(kernel: KernelIR): KernelIR {
  const operands = tileOperands(kernel);
  if (!operands || operands.nb === 0) return kernel;
  const { nb, m, n, k, b } = operands;
  const bAccess = affineOffset(b.steps, kernel.space, kernel.inputs[b.input].shape);
  if (!bAccess) return kernel;
  // Batch axes of extent 1 (a conv's single group) may weigh anything: they never move.
  const moves = (i: number) => bAccess.weights[i] !== 0 && kernel.space[i] > 1;
  let lead = nb;
  while (lead > 0 && !moves(lead - 1)) lead--;
  const rows = sizeOf(kernel.space.slice(lead, nb)) * m;
  if (lead === nb || rows * k === 0) return kernel;
  let gathering = false;
  const exprs = [...kernel.reductions, ...kernel.outputs].map((x) => x.expr);
  for (const e of exprs) {
    walk(e, (x) => x.kind === "load" && gathers(x.steps) && (gathering = true));
  }
  if (gathering) return kernel;
  const space = [...kernel.space.slice(0, lead), rows, n, k];
  const back: IndexStep = { kind: "reshape", from: space, to: kernel.space };
  const memo = new Map<Expr, Expr>();
  const folded = (e: Expr) =>
    mapLoads(e, (load) => ({ ...load, steps: [back, ...load.steps] }), memo);
  const result: KernelIR = {
    ...kernel,
    space,
    reduced: [lead + 2],
    reductions: kernel.reductions.map((r) => ({ ...r, expr: folded(r.expr) })),
    outputs: kernel.outputs.map((o) => ({ ...o, expr: folded(o.expr), steps: [back, ...o.steps] })),
  };
  const a = tileOperands(result)?.a;
  const affine = a && affineOffset(a.steps, space, kernel.inputs[a.input].shape);
  return affine ? result : kernel;
}

/** The operands of a product the tiles take: an f32 matmul's, or one over bytes. */
function tileOperands(kernel: KernelIR): MatmulOperands | undefined {
  return matmulOperands(kernel) ?? byteContraction(kernel)?.operands;
}

/**
 * The operands of a tiled matmul read as vec4 arrays: B when its columns are contiguous, aligned
 * and a multiple of 4 wide, and nothing else in the kernel reads it.
 */
export function tileVectors(kernel: KernelIR, tile: MatmulTile): Set<number> {
  const { b, n, nb } = tile;
  const aligned = quadAligned(b.steps, kernel.space, kernel.inputs[b.input].shape, nb + 1);
  return aligned && n % 4 === 0 && readOnce(kernel, b.input) ? new Set([b.input]) : new Set();
}

/** The kernel body, the epilogue helper and the workgroup arrays of a tiled matmul. */
export function emitTiledMatmul(
  l: KernelLowering,
  tile: MatmulTile,
  vectors: ReadonlySet<number>,
): { body: string[]; helpers: string[]; decls: string[] } {
  const T = tileState(l, tile, vectors);
  const fillA = filler(T, "tileA", tile.a, T.mAx, "m0", T.M, T.TM, T.RA);
  const fillB = filler(T, "tileB", tile.b, T.nAx, "n0", T.N, T.TN, T.RB);
  stepLoop(T, fillA, fillB);
  const helpers = epilogueHelper({ ...T, sum: tile.bytes ? "i32" : "f32" });
  sliceSums(T, helpers.length > LOOPED_EPILOGUE);
  const { S, TM, TN, sliced, e, RA, RB, word, acc } = T;
  return {
    body: e.lines,
    helpers,
    decls: [
      `var<workgroup> tileA: array<${word}, ${S * TK * RA}>;`,
      `var<workgroup> tileB: array<${word}, ${S * TK * RB}>;`,
      ...(sliced ? [`var<workgroup> partial: array<${acc}, ${((S - 1) * TM * TN) / 4}>;`] : []),
    ],
  };
}

/**
 * The tile's sizes and strides, and the thread setup it emits: each thread's place in the tile
 * (and, with K in slices, its slice) and its accumulators.
 */
function tileState(l: KernelLowering, tile: MatmulTile, vectors: ReadonlySet<number>) {
  const { nb, m: M, n: N, k: K, slices: S } = tile;
  const [tx, ty] = tile.threads, [pm, pn] = tile.per;
  const [TM, TN] = tileOf(tile);
  const threads = tx * ty;
  // A tile word holds one f32, or four bytes of K (KS: K values a step), and the accumulators
  // their type's sums.
  const KS = tile.bytes ? 4 * TK : TK;
  const word = tile.bytes ? "vec4<u32>" : "vec4<f32>", acc = tile.bytes ? "vec4<i32>" : "vec4<f32>";
  // K in slices: slice `kslice` (the workgroup's rows of `ty` threads, `lid.y / ty`) sums STEPS
  // steps from `kb`, in its own part of the tiles.
  const STEPS = Math.ceil(K / S / KS), sliced = S > 1;
  const space = l.kernel.space;
  const [mAx, nAx, kAx] = [nb, nb + 1, nb + 2];
  const x = l.coords;
  const e = l.e;
  for (const c of x) e.line(`var ${c}: i32 = 0;`);
  // Whether consecutive threads fill an operand's tile along K (its contiguous axis in memory),
  // and so the tile's row stride in vec4s: 8 such threads store one column of 8 rows, which a
  // stride of 16 or 32 vec4s put in one bank (an 8-way conflict); one vec4 more a row spreads
  // them over all.
  const kFast = (op: Load) => {
    const access = affineOffset(op.steps, space, l.kernel.inputs[op.input].shape);
    return access !== undefined && access.weights[kAx] === 1;
  };
  const stride = (op: Load, width: number) => width / 4 + (kFast(op) ? 1 : 0);
  const RA = stride(tile.a, TM), RB = stride(tile.b, TN);
  // A thread's row of the tile (`ly`) and index in its slice (`t`).
  const ly = sliced ? "ly" : "i32(lid.y)";
  if (sliced) {
    e.line(`let ly = i32(lid.y) % ${ty};`);
    e.line(`let t = ly * ${tx} + i32(lid.x);`);
    e.line(`let kslice = i32(lid.y) / ${ty};`);
    e.line(`let kb = kslice * ${STEPS * KS};`);
    e.line(`let ta = kslice * ${TK * RA};`);
    e.line(`let tb = kslice * ${TK * RB};`);
  } else e.line(`let t = i32(lid.y * ${tx}u + lid.x);`);
  const at = (name: string) => (sliced ? (name === "tileA" ? "ta + " : "tb + ") : "");
  e.line(`let m0 = i32(wid.y) * ${TM};`);
  e.line(`let n0 = i32(wid.x) * ${TN};`);
  l.unravel(x.slice(0, nb).map((_, i) => i), "i32(wid.z)");
  for (let r = 0; r < pm; r++) {
    for (let h = 0; h < pn / 4; h++) e.line(`var acc_${r}_${h} = ${acc}();`);
  }
  // The i8 operand's sums over K, for the u8 one's bytes taken as signed (`byte_tiles.ts`).
  if (tile.bytes) byteSumDecls(e, tile.bytes, pm, pn);
  const kWhole = K % (KS * S) === 0;
  return {
    l,
    tile,
    KS,
    word,
    acc,
    vectors,
    nb,
    M,
    N,
    K,
    S,
    tx,
    ty,
    pm,
    pn,
    TM,
    TN,
    threads,
    STEPS,
    sliced,
    space,
    mAx,
    nAx,
    kAx,
    x,
    e,
    kFast,
    stride,
    RA,
    RB,
    ly,
    at,
    kWhole,
  };
}

/** What every phase of a tiled matmul reads (see {@linkcode tileState}). */
type TileState = ReturnType<typeof tileState>;

/** An operand tile's fill (see {@linkcode filler}). */
interface Fill {
  load(k0: string): void;
  store(): void;
}

// A tile's fill: `name[k·stride + q] = (op at (k0 + k, o0 + 4q + 0..3))` for the whole tile,
// `T·TK / 4 / threads` vec4s a thread, consecutive threads along the operand's contiguous axis.
// `load` reads the step at `k0` into registers `${name}_p…`; `store` puts them in the tile.
// Shapes of whole tiles and whole K steps need no bounds checks on the operand fills (on the
// H200: 4096 from 26.5 to 28.6 TFLOP/s, 2048 from 25.5 to 27.4).
function filler(
  T: TileState,
  name: string,
  op: Load,
  ax: number,
  o0: string,
  bound: number,
  width: number,
  stride: number,
): Fill {
  const { l, tile, vectors, K, threads, space, kAx, x, e, kFast, at, kWhole, word } = T;
  const guarded = (fill: () => void, zero: () => void) => {
    if (kWhole && bound % width === 0) return fill();
    e.block(`if (${allOf(`${x[ax]} < ${bound}`, `${x[kAx]} < ${K}`)}) {`, fill);
    e.block("else {", zero);
  };
  const access = affineOffset(op.steps, space, l.kernel.inputs[op.input].shape);
  // An operand that is not an affine view (a convolution's patches) is a gather whose index
  // code runs to some 20 lines an element: its fill is a loop over a vec4's lanes, not four
  // copies of that code, since Deno's shader-module creation (WGSL parsing and validation)
  // grows with the code. ResNet-18 on the H200 (2026-11-26): WebGPU compile with the driver's
  // shader cache warm 0.94-0.97 -> 0.59 s (module creation on llvmpipe 0.84-1.08 -> 0.47-0.71
  // s), device time 12.10 -> 12.27 ms a run. As a helper function called once a vec4 the
  // modules took 0.24-0.28 s but the kernels 12.86 ms. Affine fills (plain matmuls) stay
  // unrolled, their code a line an element.
  const gathered = access === undefined && !vectors.has(op.input);
  const row4 = width / 4, count = (width * TK) / 4 / threads, alongK = kFast(op);
  const slots = [...Array(count).keys()].map((p) => {
    e.line(`let s${name}${p} = t + ${p * threads};`);
    e.line(`var ${name}_${p} = ${word}();`);
    return alongK
      ? [`s${name}${p} % ${TK}`, `s${name}${p} / ${TK}`]
      : [`s${name}${p} / ${row4}`, `s${name}${p} % ${row4}`];
  });
  const slot = (p: number) => slots[p];
  const load = (k0: string) => {
    for (let p = 0; p < count; p++) {
      const [kq, q] = slot(p);
      if (tile.bytes) {
        const unsigned = (name === "tileA") === (tile.bytes === "a");
        const vector = vectors.has(op.input) ? byteVector(l.kernel, op, ax, kAx) : undefined;
        const slot = { l, x, kAx, ax, o0, k0, kq, q, unsigned, vector, guarded };
        packSlot(slot, op, `${name}_${p}`);
        continue;
      }
      e.line(`${x[kAx]} = ${k0} + ${kq};`);
      if (vectors.has(op.input)) {
        // Four consecutive elements, aligned: one vec4 load (all four are in bounds or none).
        e.line(`${x[ax]} = ${o0} + (${q}) * 4;`);
        guarded(() => {
          const { index } = l.offset(op.steps, l.kernel.inputs[op.input].shape);
          e.line(`${name}_${p} = ${l.quad(op.input, index)};`);
        }, () => e.line(`${name}_${p} = vec4<f32>(0.0);`));
        continue;
      }
      if (gathered) {
        e.block("for (var j = 0; j < 4; j++) {", () => {
          e.line(`${x[ax]} = ${o0} + (${q}) * 4 + j;`);
          guarded(
            () => e.line(`${name}_${p}[j] = ${l.value(op as Expr, new Map())};`),
            () => e.line(`${name}_${p}[j] = 0.0;`),
          );
        });
        continue;
      }
      for (let j = 0; j < 4; j++) {
        const lane = `${name}_${p}.${"xyzw"[j]}`;
        e.line(`${x[ax]} = ${o0} + (${q}) * 4 + ${j};`);
        guarded(
          () => e.line(`${lane} = ${l.value(op as Expr, new Map())};`),
          () => e.line(`${lane} = 0.0;`),
        );
      }
    }
  };
  const store = () => {
    for (let p = 0; p < count; p++) {
      const [kq, q] = slot(p);
      e.line(`${name}[${at(name)}(${kq}) * ${stride} + ${q}] = ${name}_${p};`);
    }
  };
  return { load, store };
}

/** The K steps: each step's tiles stored, the next step's loaded, the products accumulated. */
function stepLoop(T: TileState, fillA: Fill, fillB: Fill): void {
  const { K, tx, ty, pm, pn, STEPS, sliced, mAx, nAx, x, e, RA, RB, ly, at, KS } = T;
  const load = (k0: string) => {
    e.line(`${x[nAx]} = 0;`);
    fillA.load(k0);
    e.line(`${x[mAx]} = 0;`);
    fillB.load(k0);
  };

  load(sliced ? "kb" : "0");
  // A slice's loop runs on a step count, the same in every slice: its barriers stay in uniform
  // control flow, as WGSL requires.
  const loop = sliced
    ? `for (var kq = 0; kq < ${STEPS * KS}; kq += ${KS}) {`
    : `for (var k0 = 0; k0 < ${K}; k0 += ${KS}) {`;
  e.block(loop, () => {
    if (sliced) e.line(`let k0 = kb + kq;`);
    fillA.store();
    fillB.store();
    e.line("workgroupBarrier();");
    // The next step's operands travel from memory while this one computes.
    const more = sliced ? `kq + ${KS} < ${STEPS * KS}` : `k0 + ${KS} < ${K}`;
    e.block(`if (${more}) {`, () => load(`k0 + ${KS}`));
    const body = (kk: string) => {
      for (let h = 0; h < pm / 4; h++) {
        e.line(`let a${h} = tileA[${at("tileA")}${kk} * ${RA} + ${h * ty} + ${ly}];`);
      }
      for (let h = 0; h < pn / 4; h++) {
        e.line(`let b${h} = tileB[${at("tileB")}${kk} * ${RB} + ${h * tx} + i32(lid.x)];`);
      }
      if (T.tile.bytes) return byteProducts(e, T.tile.bytes, pm, pn);
      for (let r = 0; r < pm; r++) {
        const a = `a${r >> 2}.${"xyzw"[r & 3]}`;
        for (let h = 0; h < pn / 4; h++) {
          e.line(`acc_${r}_${h} = fma(vec4<f32>(${a}), b${h}, acc_${r}_${h});`);
        }
      }
    };
    // Unrolled, so every workgroup-memory read has a constant offset: NVIDIA's compiler kept
    // the loop (H200: 1024 16.7 -> 21.3 TFLOP/s, 2048 27.4 -> 33.6, 4096 28.6 -> 36.0).
    for (let kk = 0; kk < TK; kk++) e.block("{", () => body(String(kk)));
    e.line("workgroupBarrier();");
  });
  if (T.tile.bytes) byteSums(e, T.tile.bytes, pm, pn);
}

/**
 * The epilogue calls for every accumulator (in a loop where `looped`); with K in slices, the
 * slices' sums handed to the first slice first.
 */
function sliceSums(T: TileState, looped: boolean): void {
  const { nb, M, S, tx, ty, pm, pn, threads, sliced, x, e, ly } = T;
  const batch = x.slice(0, nb);
  const epilogues = (rowBase: string) => {
    if (looped) return loopedEpilogues(T, rowBase);
    for (let r = 0; r < pm; r++) {
      const mExpr = `${rowBase} + ${(r >> 2) * 4 * ty} + ${ly} * 4 + ${r & 3}`;
      for (let h = 0; h < pn / 4; h++) {
        for (let c = 0; c < 4; c++) {
          const nExpr = `n0 + ${h * 4 * tx} + i32(lid.x) * 4 + ${c}`;
          e.line(
            `epilogue(${[...batch, mExpr, nExpr, "0"].join(", ")}, acc_${r}_${h}.${"xyzw"[c]});`,
          );
        }
      }
    }
  };
  // Slices past the first hand their sums over, one vec4 a thread at a time (consecutive
  // threads, consecutive vec4s); the first adds them and stores. The others call the epilogue at
  // rows past M, which stores nothing, so the calls stay outside a branch.
  const held = (pm * pn) / 4;
  const part = (sl: string, r: number, h: number) =>
    `partial[((${sl} - 1) * ${held} + ${r * (pn / 4) + h}) * ${threads} + t]`;
  if (sliced) {
    e.block("if (kslice > 0) {", () => {
      for (let r = 0; r < pm; r++) {
        for (let h = 0; h < pn / 4; h++) e.line(`${part("kslice", r, h)} = acc_${r}_${h};`);
      }
    });
    e.line("workgroupBarrier();");
    e.block("if (kslice == 0) {", () => {
      e.block(`for (var other = 1; other < ${S}; other++) {`, () => {
        for (let r = 0; r < pm; r++) {
          for (let h = 0; h < pn / 4; h++) {
            e.line(`acc_${r}_${h} = acc_${r}_${h} + ${part("other", r, h)};`);
          }
        }
      });
    });
    epilogues(`select(${M}, m0, kslice == 0)`);
  } else epilogues("m0");
}

/**
 * Epilogues of more lines than this are called from one loop over a thread's sums, not inlined
 * at each: NVIDIA's compiler took 0.3 s a pipeline over ResNet-50 QDQ's requantizing epilogue
 * (77 lines) at 16 sums a thread, 0.1 s with one call (`.device/scratch/pipexp.ts`, session 64).
 * A product's plain epilogues (bias, activation, residual: 12-19 lines) stay inline.
 */
export const LOOPED_EPILOGUE: number = 40;

/**
 * A thread's epilogue calls as one loop over its sums (a local array), the loop's count hidden
 * from the compiler by `k_never` so that it does not unroll them back.
 */
function loopedEpilogues(T: TileState, rowBase: string): void {
  const { nb, tx, ty, pm, pn, x, e, ly } = T;
  const count = pm * pn;
  e.line(`var k_sums: array<${T.tile.bytes ? "i32" : "f32"}, ${count}>;`);
  for (let r = 0; r < pm; r++) {
    for (let h = 0; h < pn / 4; h++) {
      [..."xyzw"].forEach((c, i) => e.line(`k_sums[${r * pn + h * 4 + i}] = acc_${r}_${h}.${c};`));
    }
  }
  e.block(`for (var k_i = 0; k_i < select(${count}, 0, k_never); k_i++) {`, () => {
    e.line(`let k_r = k_i / ${pn};`);
    e.line(`let k_c = k_i % ${pn};`);
    const m = `${rowBase} + (k_r >> 2) * ${4 * ty} + ${ly} * 4 + (k_r & 3)`;
    const n = `n0 + (k_c >> 2) * ${4 * tx} + i32(lid.x) * 4 + (k_c & 3)`;
    e.line(`epilogue(${[...x.slice(0, nb), m, n, "0"].join(", ")}, k_sums[k_i]);`);
  });
}

/** The epilogue helper: the kernel's outputs at one point of the product, from its sum. */
export function epilogueHelper(T: {
  /** The kernel's lowering (its emitter is restored after). */
  l: KernelLowering;
  /** The product's rows and columns. */
  M: number;
  N: number;
  /** The M and N axes of the kernel's space. */
  mAx: number;
  nAx: number;
  /** The coordinate names. */
  x: readonly string[];
  /** The WGSL type of the sum (default f32). */
  sum?: string;
}): string[] {
  const { l, M, N, mAx, nAx, x, sum = "f32" } = T;
  // The epilogue: the kernel's outputs at one point of the product, as a function of that point.
  const main = l.e;
  l.e = new Emitter();
  l.e.block(`if (${allOf(`${x[mAx]} < ${M}`, `${x[nAx]} < ${N}`)}) {`, () => {
    const memo = new Map<Expr, string>();
    l.kernel.outputs.forEach((o, k) => l.store(o, k, memo));
  });
  // The sum rounds once to its dtype (an f16 matmul accumulates in f32).
  const helpers = [
    `fn epilogue(${x.map((c) => `${c}: i32`).join(", ")}, sum: ${sum}) {`,
    `  let acc0 = ${rounded("sum", l.kernel.reductions[0].dtype)};`,
    ...l.e.lines,
    "}",
  ];
  l.e = main;
  return helpers;
}
