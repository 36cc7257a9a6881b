/**
 * Key tiles a flash kernel may skip: where an attention's mask makes every score of a tile −∞, its
 * weights are 0 and the tile adds nothing, so the kernel need not compute its scores and products
 * (a causal mask: about half the tiles of a long sequence). What is skipped is decided by a
 * summary kernel that runs before the flash kernel (`shaders/wgsl/tile_summary.ts`): a word per query
 * tile and key tile (whether any score is not masked) and a word per key tile (the keys' largest
 * magnitude, or all ones where a key or value is not finite); the flash kernel reads its row of
 * them and runs its loop over the range of tiles that must be computed.
 *
 * Skipping must give the bits computing would, so a tile is skipped only where computing it is
 * known to add exactly nothing:
 * - every score of the tile is −∞ whatever its dot product (the masking condition below, per
 *   score), and
 * - every value of the tile is finite (a weight of 0 times an infinite or NaN value is NaN, which
 *   the reference's row takes), and,
 * - where the mask is added (`dot·c + mask`), every dot product of the tile is finite: a tile's
 *   keys are bounded by the query tile's largest magnitude (`|dot| · c ≤ 2^126` for every pair), as
 *   an infinite or NaN dot plus −∞ is NaN, not −∞.
 *
 * The condition comes from the scores' epilogue as an expression of kernel IR, a function of the
 * dot product `acc0`: −∞ plus (or minus) a finite value stays −∞, −∞ times or over a finite
 * positive value too, and a selection whose condition does not read the dot is −∞ where its chosen
 * side is. Any other form (a mask the dot passes through otherwise) skips nothing.
 *
 * @module
 */
import type { Expr } from "../../jit/ir/kernel_ir.ts";
import type { Attention } from "./attention_group.ts";
import { literal } from "./expr.ts";
import type { Emitter } from "./emit.ts";
import { allOf, anyOf } from "./prelude.ts";

/** What a flash kernel needs to skip a masked key tile. */
export interface TileMask {
  /**
   * Per score: a WGSL bool under which the score is −∞ for every admissible dot, given the
   * dot-free subexpressions' WGSL (`value`).
   */
  readonly masked: (value: (e: Expr) => string) => string;
  /**
   * Where an added mask makes the score −∞ only for a finite dot: the largest `c` with
   * `|addend| ≤ c · |dot|`, so that `|dot| · c ≤ 2^126` keeps it finite; undefined where no
   * such bound is needed.
   */
  readonly factor?: number;
}

const bits = (x: string) => `bitcast<u32>(${x})`;
const isNegInf = (x: string) => `(${bits(x)} == 0xff800000u)`;
const isFinite = (x: string) => `((${bits(x)} & 0x7fffffffu) < 0x7f800000u)`;
const isPositive = (x: string) => `(${bits(x)} - 1u < 0x7f7fffffu)`;

/** Whether `e` reads the dot product (any `acc`). */
function readsDot(e: Expr): boolean {
  return e.kind === "acc" || (e.kind === "alu" && e.args.some(readsDot));
}

/** A finite nonzero literal's magnitude, if `e` is one. */
function scale(e: Expr): number | undefined {
  return e.kind === "const" && Number.isFinite(e.value) && e.value !== 0
    ? Math.abs(e.value)
    : undefined;
}

/**
 * `c` where `e` is the dot times or over finite nonzero literals (negated or not), so that
 * `|e| ≤ c · |dot|` (and `e` is finite where `|dot| · c ≤ 2^126`).
 */
function linear(e: Expr): number | undefined {
  if (e.kind === "acc") return 1;
  if (e.kind !== "alu") return undefined;
  const [a, b] = e.args;
  if (e.op === "Neg") return linear(a);
  if (e.op === "Mul") {
    const [x, k] = scale(b) !== undefined ? [a, scale(b)] : [b, scale(a)];
    const c = k === undefined ? undefined : linear(x);
    return c === undefined ? undefined : c * k!;
  }
  if (e.op === "Div" && scale(b) !== undefined) {
    const c = linear(a);
    return c === undefined ? undefined : c / scale(b)!;
  }
  return undefined;
}

type Condition = (value: (e: Expr) => string) => string;
const always: Condition = () => "true";

/** The masking condition of f32 scores `e` (see the module documentation), or undefined. */
export function tileMask(e: Expr): TileMask | undefined {
  let factor: number | undefined;
  // Under which `x` is finite: a condition on a dot-free value, or "true" for a bounded dot.
  const finite = (x: Expr): Condition | undefined => {
    if (x.kind === "const") return Number.isFinite(x.value) ? always : undefined;
    if (!readsDot(x)) return (value) => isFinite(value(x));
    const c = linear(x);
    if (c === undefined) return undefined;
    factor = Math.max(factor ?? 0, c);
    return () => "true";
  };
  const both = (p?: Condition, q?: Condition): Condition | undefined =>
    p && q ? (value) => allOf(p(value), q(value)) : undefined;
  const either = (p?: Condition, q?: Condition): Condition | undefined =>
    p && q ? (value) => anyOf(p(value), q(value)) : p ?? q;
  // Under which dot-free `x` is finite and positive.
  const positive = (x: Expr): Condition | undefined => {
    if (readsDot(x)) return undefined;
    if (x.kind !== "const") return (value) => isPositive(value(x));
    return x.value > 0 && Number.isFinite(x.value) ? always : undefined;
  };
  const negative = (x: Expr): Condition | undefined => {
    if (x.dtype !== "f32") return undefined;
    if (x.kind === "const") return x.value === -Infinity ? always : undefined;
    if (!readsDot(x)) return (value) => isNegInf(value(x));
    if (x.kind !== "alu") return undefined;
    const [a, b, c] = x.args;
    switch (x.op) {
      case "Add":
        return either(both(negative(a), finite(b)), both(negative(b), finite(a)));
      case "Sub":
        return both(negative(a), finite(b));
      case "Mul":
        return either(both(negative(a), positive(b)), both(negative(b), positive(a)));
      case "Div":
        return both(negative(a), positive(b));
      case "Where": {
        if (readsDot(a)) return undefined;
        const [then, otherwise] = [negative(b), negative(c)];
        if (!then && !otherwise) return undefined;
        return (value) => {
          const on = `(${value(a)} != 0u)`;
          return anyOf(
            allOf(on, then?.(value) ?? "false"),
            allOf(`!${on}`, otherwise?.(value) ?? "false"),
          );
        };
      }
      default:
        return undefined;
    }
  };
  const masked = negative(e);
  return masked ? { masked, factor } : undefined;
}

/**
 * Where an attention group's key tiles may be skipped: f32 scores that the softmax takes as they
 * are, masked as {@linkcode tileMask} reads.
 */
export function flashMask({ scores, weights }: Attention): TileMask | undefined {
  const out = scores.outputs[0], x = weights.reductions[0].expr;
  const plain = x.kind === "load" && weights.inputs[x.input].value === out.value;
  return plain && out.dtype === "f32" ? tileMask(out.expr) : undefined;
}

/** Largest `|dot| · c` that stays finite with room to spare: past it a tile is computed. */
const DOT_BOUND = 2 ** 126;

/** Reads a loop of {@linkcode keyRange} issues before it uses any. */
const UNROLLED = 32;

/** A summary's key-tile word where some key or value of the tile is not finite. */
export const NOT_FINITE = 0xffffffff;

/**
 * Workgroup memory of the kept range: `NT` minus the first tile kept, one past the last, and the
 * queries' largest magnitude (all zero at start: no tile kept).
 */
export function rangeMemory(mask: TileMask): string[] {
  return [
    "var<workgroup> lo_rev: atomic<i32>;",
    "var<workgroup> hi_end: atomic<i32>;",
    ...(mask.factor === undefined ? [] : ["var<workgroup> qmax: atomic<u32>;"]),
  ];
}

/**
 * Where the dot needs a bound: this thread's share of the query tile, in registers `qt_0…`
 * (`count` of them), into the tile's largest magnitude `qmax`.
 */
export function boundQueries(e: Emitter, mask: TileMask, count: number): void {
  if (mask.factor === undefined) return;
  e.block("{", () => {
    e.line("var qm = vec4<u32>(0u);");
    for (let k = 0; k < count; k++) {
      e.line(`qm = max(qm, bitcast<vec4<u32>>(qt_${k}) & vec4<u32>(0x7fffffffu));`);
    }
    e.line("atomicMax(&qmax, max(max(qm.x, qm.y), max(qm.z, qm.w)));");
  });
}

/**
 * The range of key tiles this workgroup computes, as WGSL i32s `lo` and `hi` (one past the last;
 * `lo >= hi` where none is): from the summary `summary` (a WGSL array of i32), whose words for
 * this workgroup's query tile start at `at` and its key-tile words at `keysAt` (WGSL i32s), `nt`
 * key tiles, `threads` threads (`t` the thread's index), heads `d` wide. A tile outside the range
 * is one whose scores are all masked, whose values are finite and, for an added mask, whose dots
 * are bounded (`|key| · max|query| · c · d ≤ 2^126`); tiles between kept ones are computed too.
 */
export function keptRange(
  e: Emitter,
  mask: TileMask,
  o: { summary: string; at: string; keysAt: string; nt: number; threads: number; d: number },
): void {
  if (mask.factor !== undefined) {
    e.line("workgroupBarrier();");
    e.line(`let qs = bitcast<f32>(atomicLoad(&qmax)) * ${literal(mask.factor * o.d, "f32")};`);
    e.line("let qok = (bitcast<u32>(qs) & 0x7fffffffu) < 0x7f800000u;");
  }
  e.block(`for (var j = t; j < ${o.nt}; j += ${o.threads}) {`, () => {
    e.line(`let kw = bitcast<u32>(${o.summary}[${o.keysAt} + j]);`);
    e.line(`var keep = ${anyOf(`${o.summary}[${o.at} + j] != 0`, "kw >= 0x7f800000u")};`);
    if (mask.factor !== undefined) {
      e.line(
        `keep = ${anyOf("keep", "!qok", `bitcast<f32>(kw) * qs > ${literal(DOT_BOUND, "f32")}`)};`,
      );
    }
    e.block("if (keep) {", () => {
      e.line(`atomicMax(&lo_rev, ${o.nt} - j);`);
      e.line("atomicMax(&hi_end, j + 1);");
    });
  });
  e.line(`let lo = ${o.nt} - workgroupUniformLoad(&lo_rev);`);
  e.line("let hi = workgroupUniformLoad(&hi_end);");
}

/**
 * The range of key tiles this workgroup computes, as {@linkcode keptRange} gives it, decided in
 * the flash kernel itself where the mask is the same for every query row (a padding mask over the
 * keys): the tiles from the first to the last with a key the mask leaves open, from `T` entries
 * (a thread every `threads`th), then over the keys outside them the summary's checks (values
 * finite; keys bounded where an added mask needs it); a key that fails them widens the range to
 * every tile. Its helpers `masked`, `key_at` and `value_at` (`maskHelpers` in
 * `tile_summary.ts`) take `batch` (WGSL i32s) first; tiles are `keys` long, heads `d` wide and
 * values `width` wide.
 */
export function keyRange(
  e: Emitter,
  mask: TileMask,
  o: {
    batch: readonly string[];
    T: number;
    keys: number;
    threads: number;
    d: number;
    width: number;
  },
): void {
  const { T, keys, threads } = o, nt = Math.ceil(T / keys);
  const at = (...rest: string[]) => [...o.batch, ...rest].join(", ");
  // Each pass of a loop issues its UNROLLED reads before it uses any (a clamped index reads an
  // element twice, harmlessly): every workgroup checks the keys outside its range, and read one
  // after another, each waiting on memory, B8 H16 T1024 D64 with a padding mask took 2.39 ms on
  // the H200, against 1.58, 1.45, 1.41, 1.38 and 1.40 ms with 4, 8, 16, 32 and 64 in flight.
  // A loop whose extent is known takes no more reads a pass than a thread has in it.
  const unrolled = (total: string, body: (i: string[]) => void, most = UNROLLED) =>
    e.block(`for (var i = t; i < ${total}; i += ${most * threads}) {`, () =>
      body(
        [...Array(most).keys()].map((u) => `min(i + ${u * threads}, ${total} - 1)`),
      ));
  // This thread's first and last tiles with an open key, then one update of the workgroup's.
  e.line(`var open_lo = ${nt};`);
  e.line("var open_hi = -1;");
  unrolled(`${T}`, (keys_) => {
    keys_.forEach((key, u) => e.line(`let open${u} = !masked(${at("0", key)});`));
    keys_.forEach((key, u) => {
      e.line(`open_lo = select(open_lo, min(open_lo, ${key} / ${keys}), open${u});`);
      e.line(`open_hi = select(open_hi, max(open_hi, ${key} / ${keys}), open${u});`);
    });
  }, Math.min(UNROLLED, Math.ceil(T / threads)));
  e.block("if (open_hi >= 0) {", () => {
    e.line(`atomicMax(&lo_rev, ${nt} - open_lo);`);
    e.line("atomicMax(&hi_end, open_hi + 1);");
  });
  // The keys outside the range, [0, head) and [tail, T), all of them where no key is open.
  e.line(`let head = min((${nt} - workgroupUniformLoad(&lo_rev)) * ${keys}, ${T});`);
  e.line(`let tail = min(max(workgroupUniformLoad(&hi_end) * ${keys}, head), ${T});`);
  e.line(`let outside = head + ${T} - tail;`);
  // The largest magnitude of the keys (where the dot needs a bound) or values outside.
  const largest = (name: string, width: number, value: (key: string, i: string) => string) => {
    e.line(`var ${name} = 0u;`);
    unrolled(`outside * ${width}`, (is) => {
      is.forEach((i, u) => {
        e.line(`let n${u} = ${i} / ${width};`);
        e.line(
          `let m${u} = bitcast<u32>(${
            value(`select(n${u}, n${u} - head + tail, n${u} >= head)`, `${i} % ${width}`)
          }) & 0x7fffffffu;`,
        );
      });
      e.line(
        `${name} = max(${name}, ${is.map((_, u) => `m${u}`).reduce((a, b) => `max(${a}, ${b})`)});`,
      );
    });
  };
  largest("vmax", o.width, (key, i) => `value_at(${at(key, i)})`);
  e.line("var bad = vmax >= 0x7f800000u;");
  if (mask.factor !== undefined) {
    largest("kmax", o.d, (key, i) => `key_at(${at(key, i)})`);
    e.line(`let qs = bitcast<f32>(atomicLoad(&qmax)) * ${literal(mask.factor * o.d, "f32")};`);
    const bounded = `bitcast<f32>(kmax) * qs <= ${literal(DOT_BOUND, "f32")}`;
    const qbad = "(bitcast<u32>(qs) & 0x7fffffffu) >= 0x7f800000u";
    e.line(
      `bad = ${allOf(anyOf("bad", "kmax >= 0x7f800000u", qbad, `!(${bounded})`), "outside > 0")};`,
    );
  }
  e.block("if (bad) {", () => {
    e.line(`atomicMax(&lo_rev, ${nt});`);
    e.line(`atomicMax(&hi_end, ${nt});`);
  });
  e.line(`let lo = ${nt} - workgroupUniformLoad(&lo_rev);`);
  e.line("let hi = workgroupUniformLoad(&hi_end);");
}
