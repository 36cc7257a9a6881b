/**
 * The tiled WGSL matmul: a 16×16 workgroup computes a T×T output tile (T = 16·`per`), each thread
 * `per`×`per` outputs held in vec4 registers. K advances 16 at a time through workgroup memory
 * laid out k-major as vec4s, so the inner loop reads `per / 2` vec4s for `per`² FMAs; a thread's
 * rows and columns are 4-wide groups 64 apart, so the threads of a warp read consecutive vec4s.
 * Operand tiles are filled through the generic index-map code (transposed, broadcast or batched
 * operands work unchanged), each thread walking the operand's contiguous axis so neighbouring
 * threads read neighbouring words; the fused epilogue is a helper function called per output.
 *
 * @module
 */
import { affineOffset } from "../jit/access.ts";
import {
  type Expr,
  type KernelIR,
  type Load,
  type MatmulOperands,
  walk,
} from "../jit/kernel_ir.ts";
import { Emitter, type KernelLowering } from "./wgsl_expr.ts";

/** A matmul's operands with the outputs per thread along each tile axis. */
export interface MatmulTile extends MatmulOperands {
  /** Outputs per thread along M and along N: 4 (64×64 tiles) or 8 (128×128 tiles). */
  readonly per: 4 | 8;
}

/** Threads per workgroup of the tiled kernel (16×16). */
export const TILE_THREADS = 256;

/** K consumed per step through workgroup memory. */
const TK = 16;

/**
 * The operands of a tiled matmul read as vec4 arrays: B when its columns are contiguous, aligned
 * and a multiple of 4 wide, and nothing else in the kernel reads it.
 */
export function tileVectors(kernel: KernelIR, tile: MatmulTile): Set<number> {
  const { b, n, nb } = tile;
  const space = kernel.space;
  const access = affineOffset(b.steps, space, kernel.inputs[b.input].shape);
  let reads = 0;
  for (const e of [...kernel.outputs.map((o) => o.expr), ...kernel.reductions.map((r) => r.expr)]) {
    walk(e, (x) => x.kind === "load" && x.input === b.input && reads++);
  }
  const aligned = access !== undefined && access.weights[nb + 1] === 1 && access.base % 4 === 0 &&
    access.weights.every((w, i) => i === nb + 1 || space[i] === 1 || w % 4 === 0);
  return aligned && n % 4 === 0 && reads === 1 ? new Set([b.input]) : new Set();
}

/** Output rows (and columns) of one tile. */
export function tileSize(tile: MatmulTile): number {
  return 16 * tile.per;
}

/** The kernel body, the epilogue helper and the workgroup arrays of a tiled matmul. */
export function emitTiledMatmul(
  l: KernelLowering,
  tile: MatmulTile,
  vectors: ReadonlySet<number>,
): { body: string[]; helpers: string[]; decls: string[] } {
  const { nb, m: M, n: N, k: K, per } = tile;
  const T = tileSize(tile), row4 = T / 4, groups = per / 4;
  const space = l.kernel.space;
  const [mAx, nAx, kAx] = [nb, nb + 1, nb + 2];
  const x = l.coords;
  const e = l.e;
  for (const c of x) e.line(`var ${c}: i32 = 0;`);
  e.line("let t = i32(lid.y * 16u + lid.x);");
  e.line(`let m0 = i32(wid.y) * ${T};`);
  e.line(`let n0 = i32(wid.x) * ${T};`);
  l.unravel(x.slice(0, nb).map((_, i) => i), "i32(wid.z)");
  for (let r = 0; r < per; r++) {
    for (let h = 0; h < groups; h++) e.line(`var acc_${r}_${h} = vec4<f32>(0.0);`);
  }

  // Fills `name[k·row4 + q] = (op at (k0 + k, o0 + 4q + 0..3))` for the whole tile: each thread
  // takes `T·TK / 4 / 256` vec4s, consecutive threads along the operand's contiguous axis.
  const fill = (name: string, op: Load, ax: number, o0: string, bound: number) => {
    const access = affineOffset(op.steps, space, l.kernel.inputs[op.input].shape);
    const kFast = access !== undefined && access.weights[kAx] === 1;
    e.block(`for (var p = 0; p < ${T / 64}; p++) {`, () => {
      e.line(`let s = t + p * ${TILE_THREADS};`);
      e.line(
        kFast
          ? `let kq = s % ${TK}; let q = s / ${TK};`
          : `let q = s % ${row4}; let kq = s / ${row4};`,
      );
      e.line(`${x[kAx]} = k0 + kq;`);
      if (vectors.has(op.input)) {
        // Four consecutive elements, aligned: one vec4 load (all four are in bounds or none).
        const v = e.fresh("w");
        e.line(`var ${v} = vec4<f32>(0.0);`);
        e.line(`${x[ax]} = ${o0} + q * 4;`);
        e.block(`if (${x[ax]} < ${bound} && ${x[kAx]} < ${K}) {`, () => {
          const { index } = l.offset(op.steps, l.kernel.inputs[op.input].shape);
          e.line(`${v} = ${l.inputs[op.input]}[u32(${index}) / 4u];`);
        });
        e.line(`${name}[kq * ${row4} + q] = ${v};`);
        return;
      }
      const lanes = [0, 1, 2, 3].map((j) => {
        const v = e.fresh("w");
        e.line(`var ${v} = 0.0;`);
        e.line(`${x[ax]} = ${o0} + q * 4 + ${j};`);
        e.block(`if (${x[ax]} < ${bound} && ${x[kAx]} < ${K}) {`, () => {
          e.line(`${v} = ${l.value(op as Expr, new Map())};`);
        });
        return v;
      });
      e.line(`${name}[kq * ${row4} + q] = vec4<f32>(${lanes.join(", ")});`);
    });
  };

  e.block(`for (var k0 = 0; k0 < ${K}; k0 += ${TK}) {`, () => {
    e.line(`${x[nAx]} = 0;`);
    fill("tileA", tile.a, mAx, "m0", M);
    e.line(`${x[mAx]} = 0;`);
    fill("tileB", tile.b, nAx, "n0", N);
    e.line("workgroupBarrier();");
    e.block(`for (var kk = 0; kk < ${TK}; kk++) {`, () => {
      for (let h = 0; h < groups; h++) {
        e.line(`let a${h} = tileA[kk * ${row4} + ${h * 16} + i32(lid.y)];`);
        e.line(`let b${h} = tileB[kk * ${row4} + ${h * 16} + i32(lid.x)];`);
      }
      for (let r = 0; r < per; r++) {
        const a = `a${r >> 2}.${"xyzw"[r & 3]}`;
        for (let h = 0; h < groups; h++) {
          e.line(`acc_${r}_${h} = fma(vec4<f32>(${a}), b${h}, acc_${r}_${h});`);
        }
      }
    });
    e.line("workgroupBarrier();");
  });

  const batch = x.slice(0, nb);
  for (let r = 0; r < per; r++) {
    const mExpr = `m0 + ${(r >> 2) * 64} + i32(lid.y) * 4 + ${r & 3}`;
    for (let h = 0; h < groups; h++) {
      for (let c = 0; c < 4; c++) {
        const nExpr = `n0 + ${h * 64} + i32(lid.x) * 4 + ${c}`;
        e.line(
          `epilogue(${[...batch, mExpr, nExpr, "0"].join(", ")}, acc_${r}_${h}.${"xyzw"[c]});`,
        );
      }
    }
  }

  // The epilogue: the kernel's outputs at one point of the product, as a function of that point.
  const main = l.e;
  l.e = new Emitter();
  l.e.block(`if (${x[mAx]} < ${M} && ${x[nAx]} < ${N}) {`, () => {
    const memo = new Map<Expr, string>();
    l.kernel.outputs.forEach((o, k) => l.store(o, k, memo));
  });
  const helpers = [
    `fn epilogue(${x.map((c) => `${c}: i32`).join(", ")}, acc0: f32) {`,
    ...l.e.lines,
    "}",
  ];
  l.e = main;
  return {
    body: e.lines,
    helpers,
    decls: [
      `var<workgroup> tileA: array<vec4<f32>, ${TK * row4}>;`,
      `var<workgroup> tileB: array<vec4<f32>, ${TK * row4}>;`,
    ],
  };
}
