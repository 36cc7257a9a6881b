/**
 * Device tensors on wasm: a tensor a run left in its program's arena (`Program.runResident`),
 * which a later run of that program takes without a trip through the host, and a run of another
 * wasm program by one copy between arenas. A generation's decode step feeds its caches back this
 * way: on the host they went out of the arena and back in, two copies of every cache a token
 * (6.3 MB each way for a Qwen2.5-0.5B-shaped decoder at 256 positions), now one inside it.
 *
 * An arena's places are written by every run, so a tensor living there moves before a run
 * writes over it: to the argument place it was just copied to (which that run reads, never
 * writes), or else to the host. A tensor is never wrong, only sometimes copied.
 *
 * @module
 */
import { type DType, matchesDType, type TensorData } from "../../jit/ir/dtype.ts";
import type { RefTensor } from "../../jit/ir/host_tensor.ts";
import { type DeviceStorage, DeviceTensor } from "../../jit/runtime/device_tensor.ts";
import { KilnError } from "../../jit/support/errors.ts";
import { count } from "../../jit/runtime/counters.ts";
import { elementBytes, wordsInto, writeWords } from "../words.ts";
import { WORDS } from "./arena_layout.ts";

/** A program's arena: its memory and the device tensors living in it. */
export class ArenaHome {
  /** The arena's memory. */
  readonly memory: WebAssembly.Memory;
  /** Tensors whose words are in the arena now. */
  readonly live: Set<ArenaStorage> = new Set();

  /** The home of an arena in `memory`. */
  constructor(memory: WebAssembly.Memory) {
    this.memory = memory;
  }

  /** Moves every tensor living here to the host (the arena is going away). */
  evacuate(): void {
    for (const s of [...this.live]) s.spill();
  }
}

/** A wasm device tensor's words: in an arena, or on the host where none holds them. */
export class ArenaStorage implements DeviceStorage {
  /** Always `"wasm"`. */
  readonly backend: string = "wasm";
  /** Dtype of the elements. */
  readonly dtype: DType;
  /** Number of elements. */
  readonly length: number;
  #home?: ArenaHome;
  #at = 0;
  #host?: TensorData;

  private constructor(dtype: DType, length: number) {
    this.dtype = dtype;
    this.length = length;
  }

  /** A tensor of `length` elements at byte `at` of `home`'s arena. */
  static inArena(home: ArenaHome, at: number, dtype: DType, length: number): ArenaStorage {
    const s = new ArenaStorage(dtype, length);
    s.moveTo(home, at);
    return s;
  }

  /** A tensor of `data` (of `dtype`, taken, not copied) on the host. */
  static onHost(data: TensorData, dtype: DType): ArenaStorage {
    const s = new ArenaStorage(dtype, data.length);
    s.#host = data;
    return s;
  }

  /** Its byte offset in `home`'s arena, where it lives there. */
  at(home: ArenaHome): number | undefined {
    return this.#home === home ? this.#at : undefined;
  }

  /** Bytes of its words. */
  get bytes(): number {
    return this.length * elementBytes(this.dtype, WORDS);
  }

  /** Elements `[offset, offset + length)`, copied (into `into` where it fits). */
  read(offset: number, length: number, into?: TensorData): Promise<TensorData> {
    return Promise.resolve(this.copy(offset, length, into));
  }

  /** `read`, now. */
  copy(offset: number, length: number, into?: TensorData): TensorData {
    if (this.#home) {
      const at = this.#at + offset * elementBytes(this.dtype, WORDS);
      return wordsInto(into, this.#home.memory.buffer, at, length, this.dtype);
    }
    const part = this.#host!.subarray(offset, offset + length);
    if (!into || !matchesDType(into, this.dtype) || into.length < length) return part.slice();
    (into as Float32Array).set(part as Float32Array);
    return into;
  }

  /** Overwrites elements from `offset` with `data` (of its dtype). */
  write(data: TensorData, offset: number): void {
    if (!this.#home) return (this.#host as Float32Array).set(data as Float32Array, offset);
    const at = this.#at + offset * elementBytes(this.dtype, WORDS);
    writeWords(this.#home.memory.buffer, at, data, this.dtype);
  }

  /** Lets the words go. */
  release(): void {
    this.#home?.live.delete(this);
    this.#home = undefined;
    this.#host = undefined;
  }

  /** Writes its words at byte `at` of `memory` (an argument's place in an arena). */
  copyTo(memory: WebAssembly.Memory, at: number): void {
    const bytes = this.bytes;
    if (this.#home?.memory === memory) {
      new Uint8Array(memory.buffer).copyWithin(at, this.#at, this.#at + bytes);
    } else if (this.#home) {
      new Uint8Array(memory.buffer, at, bytes).set(
        new Uint8Array(this.#home.memory.buffer, this.#at, bytes),
      );
    } else writeWords(memory.buffer, at, this.#host!, this.dtype);
  }

  /** Lives at byte `at` of `home`'s arena from now on (its words are there already). */
  moveTo(home: ArenaHome, at: number): void {
    this.#home?.live.delete(this);
    this.#home = home;
    this.#at = at;
    this.#host = undefined;
    home.live.add(this);
  }

  /** Copies its words to the host, before a run writes over their place. */
  spill(): void {
    if (!this.#home) return;
    const host = this.copy(0, this.length);
    count("kiln_wasm_host_bytes_total", host.byteLength);
    this.#home.live.delete(this);
    this.#home = undefined;
    this.#host = host;
  }
}

/** A place of a run's argument in the arena: its byte offset and the dtype held there. */
export interface ArgumentPlace {
  readonly at: number;
  readonly dtype: DType;
}

/** `t`'s storage, where it is a wasm one. */
function arenaStorage(t: DeviceTensor): ArenaStorage {
  const s = t.storage();
  if (s instanceof ArenaStorage) return s;
  throw new KilnError(`A device tensor of ${s.backend} cannot feed this wasm run`, {
    code: "bad-input",
    fix: "read() it to the host and pass the host tensor (or run both on one backend)",
  });
}

/**
 * Before a run in `home`: the device tensors among `args` copied to their places (`places`, by
 * argument; undefined where no kernel reads it), unless already there, and every other tensor
 * living in the arena moved off the places the run writes: to an argument's place it was copied
 * to, else to the host. An argument at another of the arena's places first asks `swap` to trade
 * its place for that one (`arena_places.ts`), which spares the copy. Returns, per argument,
 * whether it was placed here (host ones were not).
 */
export function placeArguments(
  home: ArenaHome,
  places: readonly (ArgumentPlace | undefined)[],
  args: readonly (RefTensor | DeviceTensor)[],
  swap?: (i: number, at: number) => boolean,
): boolean[] {
  const stores = args.map((a) => (a instanceof DeviceTensor ? arenaStorage(a) : undefined));
  stores.forEach((s, i) => {
    const at = s?.at(home), p = places[i];
    if (swap && at !== undefined && p && at !== p.at && s!.dtype === p.dtype) swap(i, at);
  });
  const argumentAt = new Map<number, number>();
  places.forEach((p, i) => p && argumentAt.set(p.at, i));
  // A tensor at an argument's place that this run writes with something else goes first.
  for (const s of [...home.live]) {
    const i = argumentAt.get(s.at(home)!);
    if (i !== undefined && stores[i] !== s) s.spill();
  }
  stores.forEach((s, i) => {
    const p = places[i];
    if (!s || !p || s.at(home) === p.at) return;
    if (s.dtype !== p.dtype) {
      throw new KilnError(
        `A device tensor of ${s.dtype} words feeds an argument this program holds as ${p.dtype}`,
        { code: "bad-input", fix: "read() it to the host and pass the host tensor" },
      );
    }
    s.copyTo(home.memory, p.at);
  });
  // Outputs' places are written by the run: their tensors follow their copies or go out.
  for (const s of [...home.live]) {
    if (argumentAt.has(s.at(home)!)) continue;
    const i = stores.findIndex((t, j) => t === s && places[j]);
    if (i >= 0) s.moveTo(home, places[i]!.at);
    else s.spill();
  }
  return stores.map((s, i) => s !== undefined && places[i] !== undefined);
}
