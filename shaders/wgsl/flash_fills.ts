/**
 * How the flash attention kernel (`flash_kernel.ts`) moves its query, key and value tiles into
 * workgroup memory: vec4s of four consecutive lanes (query rows, keys or value columns) along
 * the other axis, read into registers a tile ahead and stored once the tile before is done.
 *
 * @module
 */
import { affineOffset } from "../../jit/ir/access.ts";
import type { Load } from "../../jit/ir/kernel_ir.ts";
import type { KernelLowering } from "./expr.ts";
import type { Emitter } from "./emit.ts";
import { allOf } from "./prelude.ts";

/**
 * Tile `name` from load `op` of lowering `l`: `name[a · groups + g]` holds the elements at `lane`
 * axis coordinates `lane.base(t) + 4g + 0..3` and `along` axis coordinate `along.base(t) + a`,
 * zero past the bounds, for the tile starting at key `t`. `load(t)` reads a thread's share into
 * registers `${name}_…`, `store()` puts them in the tile, so the next tile's reads can travel
 * while this one computes. Consecutive threads walk whichever axis is contiguous in memory;
 * where that is the `along` axis, with `padded` a tile row is `groups + 1` vec4s long, so that
 * eight threads storing one lane group at consecutive rows hit eight different banks (a
 * stride of 8 or 16 vec4s put them all in one: an 8-way conflict).
 */
export function filler(
  f: { readonly threads: number; readonly e: Emitter },
  name: string,
  l: KernelLowering,
  op: Load,
  lane: { axis: number; base: (t: string) => string; bound: number; groups: number },
  along: { axis: number; base: (t: string) => string; bound: number; extent: number },
  padded = true,
): Filler {
  const { threads, e } = f;
  const access = affineOffset(op.steps, l.kernel.space, l.kernel.inputs[op.input].shape);
  const alongFast = access !== undefined && access.weights[along.axis] === 1;
  const stride = lane.groups + (alongFast && padded ? 1 : 0);
  const total = lane.groups * along.extent, count = Math.ceil(total / threads);
  const slot = (k: number) => {
    e.line(`let p = t + ${k * threads};`);
    e.line(
      alongFast
        ? `let a = p % ${along.extent}; let g = p / ${along.extent};`
        : `let a = p / ${lane.groups}; let g = p % ${lane.groups};`,
    );
  };
  // Only the last slot can pass the tile's end, and only when threads do not divide it.
  const guarded = (k: number, body: () => void) =>
    (k + 1) * threads > total ? e.block(`if (t + ${k * threads} < ${total}) {`, body) : body();
  for (let k = 0; k < count; k++) e.line(`var ${name}_${k} = vec4<f32>(0.0);`);
  // Bounds that whole tiles divide need no clamps or zero fill (tile starts are multiples).
  const laneWhole = lane.bound % (4 * lane.groups) === 0;
  const alongWhole = along.bound % along.extent === 0;
  const clamp = (c: string, bound: number, whole: boolean) => whole ? c : `min(${c}, ${bound - 1})`;
  const load = (t: string) => {
    for (let k = 0; k < count; k++) {
      guarded(k, () =>
        e.block("{", () => {
          slot(k);
          e.line(`let at = ${along.base(t)} + a;`);
          e.line(`${l.coords[along.axis]} = ${clamp("at", along.bound, alongWhole)};`);
          for (let i = 0; i < 4; i++) {
            e.block("{", () => {
              e.line(`let c = ${lane.base(t)} + 4 * g + ${i};`);
              e.line(`${l.coords[lane.axis]} = ${clamp("c", lane.bound, laneWhole)};`);
              const value = l.value(op, new Map());
              const inside = [
                ...(laneWhole ? [] : [`c < ${lane.bound}`]),
                ...(alongWhole ? [] : [`at < ${along.bound}`]),
              ];
              e.line(
                `${name}_${k}.${"xyzw"[i]} = ${
                  inside.length ? `select(0.0, ${value}, ${allOf(...inside)})` : value
                };`,
              );
            });
          }
        }));
    }
  };
  const store = () => {
    for (let k = 0; k < count; k++) {
      guarded(k, () =>
        e.block("{", () => {
          slot(k);
          e.line(`${name}[a * ${stride} + g] = ${name}_${k};`);
        }));
    }
  };
  return { load, store, stride, count };
}

/** A tile filler (see {@linkcode filler}). */
export interface Filler {
  /** Reads the tile starting at key `t` into the thread's registers. */
  load(t: string): void;
  /** Stores the registers into the tile. */
  store(): void;
  /** A tile row's length in vec4s. */
  readonly stride: number;
  /** Registers (vec4s) a thread holds. */
  readonly count: number;
}
