/**
 * A packed convolution's gather of A through a factored indirection table (see `TableTaps`):
 * each output pixel's patch, every channel's every tap, into the scratch the tiled GEMM reads.
 * Rows away from the border skip the masks, and copy each kernel row's taps as vectors where
 * they are consecutive elements.
 *
 * @module
 */
import type { TableTaps } from "./matmul_plan.ts";
import type { KernelFunction } from "./module.ts";

/** Taps a factored table's gather keeps in locals (a row's addresses and masks); more loop. */
const LOCAL_TAPS = 49;

/** The rows a gather copies and where: locals of the generated function, and an expression. */
export interface GatherRows {
  /** Local: where the next row's patch is written (moved past each). */
  readonly dst: number;
  /** Local: the current row. */
  readonly row: number;
  /** Local: the first row. */
  readonly lo: number;
  /** Local: the row past the last. */
  readonly hi: number;
  /** The byte address of row `lo`'s entries in the table. */
  readonly table: number;
}

/**
 * Gathers rows `[lo, hi)` of A into the scratch (at `dst`) through a factored table: each tap's
 * address and mask once a row, then every channel's element of every tap, a channel `stride`
 * further on; a masked-out tap adds nothing to the fill cell's address.
 */
export function gatherTaps(
  fn: KernelFunction,
  taps: TableTaps,
  { dst, row: r, lo, hi, table }: GatherRows,
): number[] {
  const { m, wasm, local, get, ic, whileLoop, countedLoop } = fn;
  const i32 = wasm.i32;
  const at = local(i32), off = local(i32), c = local(i32);
  const unrolled = taps.taps <= LOCAL_TAPS;
  const addr = unrolled ? [...Array(taps.taps).keys()].map(() => local(i32)) : [];
  const mask = unrolled ? [...Array(taps.taps).keys()].map(() => local(i32)) : [];
  const t = local(i32), p = local(i32);
  const read = (address: number, masked: number) =>
    m.f32.load(0, 4, m.i32.add(address, m.i32.and(get(off, i32), masked)));
  /** A channel's taps, in locals: masked, or where every tap is in bounds, not. */
  const unrolledChannel = (masked: boolean) => [
    ...addr.map((l, j) =>
      m.f32.store(
        4 * j,
        4,
        get(dst, i32),
        masked
          ? read(get(l, i32), get(mask[j], i32))
          : m.f32.load(0, 4, m.i32.add(get(l, i32), get(off, i32))),
      )
    ),
    m.local.set(dst, m.i32.add(get(dst, i32), ic(4 * taps.taps))),
  ];
  const channels = (channel: number[]) => [
    m.local.set(off, ic(0)),
    ...countedLoop(c, taps.channels, [
      ...channel,
      m.local.set(off, m.i32.add(get(off, i32), ic(4 * taps.stride))),
    ]),
  ];
  const walked = [
    m.local.set(p, get(at, i32)),
    ...countedLoop(t, taps.taps, [
      m.f32.store(
        0,
        4,
        get(dst, i32),
        read(m.i32.load(0, 4, get(p, i32)), m.i32.load(4, 4, get(p, i32))),
      ),
      m.local.set(dst, m.i32.add(get(dst, i32), ic(4))),
      m.local.set(p, m.i32.add(get(p, i32), ic(8))),
    ]),
  ];
  const tapLocals = addr.flatMap((l, j) => [
    m.local.set(l, m.i32.load(8 * j, 4, get(at, i32))),
    m.local.set(mask[j], m.i32.load(8 * j + 4, 4, get(at, i32))),
  ]);
  // Most rows (pixels away from the border) read every tap in bounds: they skip the masks,
  // and where a kernel row's taps are consecutive elements, copy them as vectors from the
  // first tap's address (shufflenet's stem: 27 scalar copies a row become 9 vector ones).
  const whole = (mask: (j: number) => number) =>
    m.i32.eq(addr.reduce((all, _, j) => m.i32.and(all, mask(j)), ic(-1)), ic(-1));
  const gather = !unrolled ? channels(walked) : taps.lines
    ? [
      m.if(
        whole((j) => m.i32.load(8 * j + 4, 4, get(at, i32))),
        m.block(null, [
          m.local.set(addr[0], m.i32.load(0, 4, get(at, i32))),
          ...lines(fn, taps, { dst, off, c, src: addr[0] }),
        ]),
        m.block(null, [...tapLocals, ...channels(unrolledChannel(true))]),
      ),
    ]
    : [
      ...tapLocals,
      m.if(
        whole((j) => get(mask[j], i32)),
        m.block(null, channels(unrolledChannel(false))),
        m.block(null, channels(unrolledChannel(true))),
      ),
    ];
  return [
    m.local.set(r, get(lo, i32)),
    m.local.set(at, table),
    whileLoop(() => m.i32.lt_s(get(r, i32), get(hi, i32)), [
      ...gather,
      m.local.set(at, m.i32.add(get(at, i32), ic(8 * taps.taps))),
      m.local.set(r, m.i32.add(get(r, i32), ic(1))),
    ]),
  ];
}

/**
 * An in-bounds row's gather by kernel rows (see `TableTaps.lines`), from the address of its
 * first tap in local `at.src`: each `length` elements
 * from the first tap's address, as vectors. A vector of a 3-tap row reads and writes one
 * element past it, which the next copy overwrites and `lines` keeps within A's data, except
 * for the row's last copy, which is exact.
 */
function lines(
  fn: KernelFunction,
  { channels: count, taps: size, stride, lines }: TableTaps,
  at: { dst: number; off: number; c: number; src: number },
): number[] {
  const { m, wasm, local, get, ic, countedLoop } = fn;
  const i32 = wasm.i32;
  const { dst, off, c } = at;
  const { length, stride: apart } = lines!, src = local(i32);
  const kernelRows = size / length;
  /** Copies `length` elements at `from` bytes past src to `to` bytes past dst. */
  const copy = (from: number, to: number, exact: boolean): number[] => {
    const v = (at: number) =>
      m.v128.store(to + at, 4, get(dst, i32), m.v128.load(from + at, 4, get(src, i32)));
    // Two elements as one f64: a load and store carry its bits unchanged, NaNs too.
    const pair = (at: number) =>
      m.f64.store(to + at, 4, get(dst, i32), m.f64.load(from + at, 4, get(src, i32)));
    const one = (at: number) =>
      m.f32.store(to + at, 4, get(dst, i32), m.f32.load(from + at, 4, get(src, i32)));
    if (length >= 4) {
      const starts = [...Array(length >> 2).keys()].map((j) => 16 * j);
      if (length % 4) starts.push(4 * (length - 4));
      return starts.map(v);
    }
    if (length === 3) return exact ? [pair(0), one(8)] : [v(0)];
    return [length === 2 ? pair(0) : one(0)];
  };
  const channel = (last: boolean) => [
    m.local.set(src, m.i32.add(get(at.src, i32), get(off, i32))),
    ...[...Array(kernelRows).keys()].flatMap((y) =>
      copy(4 * y * apart, 4 * y * length, last && y === kernelRows - 1)
    ),
    m.local.set(off, m.i32.add(get(off, i32), ic(4 * stride))),
    m.local.set(dst, m.i32.add(get(dst, i32), ic(4 * size))),
  ];
  return [
    m.local.set(off, ic(0)),
    ...countedLoop(c, count - 1, channel(false)),
    ...channel(true),
  ];
}
