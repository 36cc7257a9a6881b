/**
 * One `WebAssembly.Memory` for the programs of one model. A generation compiles its prefill and
 * its decode step as two programs, and each arena held every weight: after one generation of a
 * Qwen2.5-0.5B-shaped decoder (an 862 MB file) the process held 3.46 GB. Programs whose fixed
 * values (params, constants) view the same bytes now lease places in one memory: each such value
 * once, at a place every tenant reads, and each program's own places (intermediates, arguments,
 * outputs, scratch, packed panels) in a region of its own. A program runs to its end before
 * another starts (an arena run is synchronous), so tenants never write at once.
 *
 * A shared place remembers the data last written there: a tenant writes its data again only where
 * another wrote something else (a param changed in one executable and not the other).
 *
 * @module
 */
import type { DType, TensorData } from "../../jit/ir/dtype.ts";
import {
  type ArenaLayout,
  arenaLayout,
  FAULT_BYTES,
  type LayoutPlan,
  MAX_PAGES,
  PAGE,
} from "./arena_layout.ts";

/** A fixed value's data and how the arena stores it: what makes two places one. */
export interface FixedValue {
  readonly data: TensorData;
  readonly dtype: DType;
  /** Its bytes in the arena. */
  readonly bytes: number;
  /** Whether it is held a byte an element (`held_zeros.ts`), not in words. */
  readonly held: boolean;
}

/** A place several programs read: the data last written there, where any was. */
export interface SharedPlace {
  /** Its byte offset in the memory. */
  readonly at: number;
  readonly bytes: number;
  /** The data last written there (undefined: unknown, so the next tenant writes). */
  holds?: TensorData;
  /** The tenants that read it. */
  users: number;
}

/**
 * Whether `place` holds `data`'s bytes: the array written there last, or a view of the same bytes
 * (programs compiled from one model view its weights in arrays of their own).
 */
export function holding(place: SharedPlace, data: TensorData): boolean {
  const h = place.holds;
  return h === data || (h !== undefined && h.buffer === data.buffer &&
    h.byteOffset === data.byteOffset && h.byteLength === data.byteLength &&
    h.constructor === data.constructor);
}

/** A program's tenancy in a share: its fixed values' places and its own region. */
export interface Lease {
  /** The memory of the share (grown to hold the region). */
  readonly memory: WebAssembly.Memory;
  /** The first byte of the program's own region. */
  readonly base: number;
  /** The fixed values' places, by the program's value ids. */
  readonly places: ReadonlyMap<number, SharedPlace>;
  /** Gives the region and the places back (the program is gone). */
  end(): void;
}

/** Programs' places in one memory (see the module's description). */
export class ArenaShare {
  /** Whether the memory is shared with worker threads. */
  readonly shared: boolean;
  #memory?: WebAssembly.Memory;
  /** The byte after the last place handed out; free ranges below it, by offset. */
  #top = FAULT_BYTES;
  #free: { at: number; bytes: number }[] = [];
  /** Places by the data's buffer, then its view and form. */
  #places = new Map<ArrayBufferLike, Map<string, SharedPlace>>();
  #keys = new Map<SharedPlace, [ArrayBufferLike, string]>();

  /** A share whose memory is shared with workers where `shared` (threads > 1). */
  constructor(shared: boolean) {
    this.shared = shared;
  }

  /** Bytes of the memory handed out (places and regions, freed ones below the top included). */
  get top(): number {
    return this.#top;
  }

  /**
   * A tenancy: `fixed` placed where another tenant holds the same data (else anew), and a region
   * of `own(places)` bytes (`places`: those placed here); undefined where the memory would pass
   * what wasm addresses. Two values of one program over the same bytes share no place (a param of
   * the two may change alone): the second stays in the program's region.
   */
  lease(
    fixed: ReadonlyMap<number, FixedValue>,
    ownBytes: (places: ReadonlyMap<number, SharedPlace>) => number,
  ): Lease | undefined {
    const places = new Map<number, SharedPlace>();
    const mine = new Set<SharedPlace>();
    for (const [value, f] of fixed) {
      const key = `${f.data.byteOffset} ${f.data.byteLength} ${f.dtype} ${f.bytes} ${f.held}`;
      const byKey = this.#places.get(f.data.buffer) ?? new Map<string, SharedPlace>();
      this.#places.set(f.data.buffer, byKey);
      let place = byKey.get(key);
      if (!place) {
        byKey.set(key, place = { at: this.#take(f.bytes), bytes: f.bytes, users: 0 });
        this.#keys.set(place, [f.data.buffer, key]);
      }
      if (mine.has(place)) continue;
      mine.add(place);
      place.users++;
      places.set(value, place);
    }
    const own = ownBytes(places);
    const base = this.#take(own);
    let ended = false;
    const end = () => {
      if (!ended) this.#end({ at: base, bytes: own }, mine);
      ended = true;
    };
    const memory = this.#grown(Math.max(1, Math.ceil(this.#top / PAGE)));
    if (!memory) {
      end();
      return undefined;
    }
    return { memory, base, places, end };
  }

  /**
   * The memory, grown to `pages` at least (made at the first lease); undefined where it cannot
   * grow so far: past what wasm addresses, or past the maximum an engine that reserves a shared
   * memory's whole range up front allowed (then the first lease's pages: later tenants take
   * memories of their own).
   */
  #grown(pages: number): WebAssembly.Memory | undefined {
    if (pages > MAX_PAGES) return undefined;
    const made = (maximum: number) =>
      new WebAssembly.Memory({
        initial: pages,
        maximum,
        shared: this.shared,
      } as WebAssembly.MemoryDescriptor);
    try {
      if (!this.#memory) {
        try {
          this.#memory = made(MAX_PAGES);
        } catch {
          this.#memory = made(pages);
        }
      }
      const now = this.#memory.buffer.byteLength / PAGE;
      if (pages > now) this.#memory.grow(pages - now);
      return this.#memory;
    } catch {
      return undefined;
    }
  }

  /** Gives a tenant's region back, and the places no tenant reads any more. */
  #end(region: { at: number; bytes: number }, given: Iterable<SharedPlace>): void {
    this.#give(region.at, region.bytes);
    for (const place of given) {
      if (--place.users > 0) continue;
      this.#give(place.at, place.bytes);
      const [buffer, key] = this.#keys.get(place)!;
      this.#keys.delete(place);
      const byKey = this.#places.get(buffer)!;
      byKey.delete(key);
      if (byKey.size === 0) this.#places.delete(buffer);
    }
  }

  /** `bytes` (rounded to 16) from the first free range that fits, else from the top. */
  #take(bytes: number): number {
    const n = Math.ceil(bytes / 16) * 16;
    const i = this.#free.findIndex((r) => r.bytes >= n);
    if (i < 0) return (this.#top += n) - n;
    const r = this.#free[i];
    if (r.bytes === n) this.#free.splice(i, 1);
    else this.#free[i] = { at: r.at + n, bytes: r.bytes - n };
    return r.at;
  }

  /** Frees `[at, at + bytes)`: merged with its free neighbours, the top lowered where it ends. */
  #give(at: number, bytes: number): void {
    const n = Math.ceil(bytes / 16) * 16;
    if (n === 0) return;
    const free = this.#free;
    let i = free.findIndex((r) => r.at > at);
    if (i < 0) i = free.length;
    free.splice(i, 0, { at, bytes: n });
    if (i + 1 < free.length && at + n === free[i + 1].at) {
      free[i] = { at, bytes: n + free[i + 1].bytes };
      free.splice(i + 1, 1);
    }
    if (i > 0 && free[i - 1].at + free[i - 1].bytes === at) {
      free[i - 1] = { at: free[i - 1].at, bytes: free[i - 1].bytes + free[i].bytes };
      free.splice(i, 1);
      i--;
    }
    const last = free.at(-1)!;
    if (last.at + last.bytes === this.#top) {
      this.#top = last.at;
      free.pop();
    }
  }
}

/** What a program's places are made from: its layout's plan, and where it may lease them. */
export interface SharePlan extends LayoutPlan {
  /** The share the program leases its places in (absent: a memory of its own). */
  readonly share?: ArenaShare;
  /** The params' data at compile, by value: what makes a param's place one with another's. */
  readonly paramData?: ReadonlyMap<number, TensorData>;
}

/** A program's layout and memory, and its lease where it took one. */
export interface ArenaPlaces {
  readonly layout: ArenaLayout;
  readonly memory: WebAssembly.Memory;
  readonly lease?: Lease;
}

/** The layout and memory of `plan`: leased from its share where it has one, else its own. */
export function arenaOf(plan: SharePlan): ArenaPlaces {
  const alone = arenaLayout(plan);
  const shared = (plan.threads ?? 1) > 1;
  const share = plan.share?.shared === shared ? plan.share : undefined;
  const fixed = share ? fixedValues(plan, alone) : new Map();
  // Without the places shared, the program's own bytes are those it needs alone less theirs.
  const own = (places: ReadonlyMap<number, SharedPlace>) =>
    alone.end - FAULT_BYTES - [...places.values()].reduce((n, p) => n + p.bytes, 0);
  const lease = fixed.size > 0 ? share!.lease(fixed, own) : undefined;
  if (lease) {
    const at = new Map([...lease.places].map(([v, p]) => [v, p.at]));
    const layout = arenaLayout(plan, { base: lease.base, shared: at });
    // A layout past its region would write other tenants' places: a memory of its own instead.
    if (layout.end <= lease.base + own(lease.places)) {
      return { layout, memory: lease.memory, lease };
    }
    lease.end();
  }
  const memory = new WebAssembly.Memory({
    initial: alone.pages,
    maximum: shared ? alone.pages : MAX_PAGES,
    shared,
  } as WebAssembly.MemoryDescriptor);
  return { layout: alone, memory };
}

/** The fixed values of `plan` at places of their own in `layout`, with the data they hold. */
function fixedValues(plan: SharePlan, layout: ArenaLayout): Map<number, FixedValue> {
  const fixed = new Map<number, FixedValue>();
  for (const [value, bytes] of layout.fixedBytes) {
    const data = plan.constants.get(value)?.data ?? plan.paramData?.get(value);
    if (!data) continue;
    const { dtype } = layout.types.get(value)!;
    fixed.set(value, { data, dtype, bytes, held: layout.held.has(value) });
  }
  return fixed;
}

const gone = new FinalizationRegistry<Lease>((lease) => lease.end());

/**
 * `lease`, given back once `home` is collected (the program and every tensor living in its places
 * gone) unless ended before.
 */
export function heldBy(home: object, lease: Lease): Lease {
  const token = {};
  gone.register(home, lease, token);
  const end = () => {
    gone.unregister(token);
    lease.end();
  };
  return { ...lease, end };
}

/**
 * A backend's shares, one a model: a program joins the share of the buffer its largest fixed
 * value views (a model's weights, which its programs all read), else starts one.
 */
export class Shares {
  readonly #shared: boolean;
  #byBuffer = new WeakMap<ArrayBufferLike, WeakRef<ArenaShare>>();

  /** The shares of a backend whose memories are shared with workers where `shared`. */
  constructor(shared: boolean) {
    this.#shared = shared;
  }

  /** The share of a program whose fixed values hold `fixed` (none where it holds none). */
  of(fixed: Iterable<TensorData>): ArenaShare | undefined {
    let largest: TensorData | undefined;
    for (const d of fixed) if (!largest || d.byteLength > largest.byteLength) largest = d;
    if (!largest) return undefined;
    const known = this.#byBuffer.get(largest.buffer)?.deref();
    if (known) return known;
    const share = new ArenaShare(this.#shared);
    this.#byBuffer.set(largest.buffer, new WeakRef(share));
    return share;
  }
}
