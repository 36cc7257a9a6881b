/**
 * What a generation step is fed besides its caches' contents: the token ids, positions, mask
 * and cache-slot map of a step of `ids` after `past` valid entries, in the dtypes the decoder
 * declares, and the empty caches of the first step.
 *
 * @module
 */
import { allocate, type BoundaryDType, fromNumbers, internalDType } from "../../jit/ir/dtype.ts";
import type { HostTensor } from "../../jit/ir/host_tensor.ts";
import type { InputMap } from "../../jit/runtime/executable.ts";
import type { Decoder } from "./decoder.ts";
import { STEP } from "./step_model.ts";

/** One step's inputs besides the caches: `ids` after `past` valid entries. */
export function stepFeeds(
  d: Decoder,
  ids: readonly number[],
  past: number,
  capacity: number | undefined,
): InputMap {
  const s = ids.length, feeds: InputMap = {};
  feeds[d.ids] = ints(ids, [1, s], d.dtypes[d.ids]);
  const positions = ids.map((_, i) => past + i);
  if (d.positions) feeds[d.positions] = ints(positions, [1, s], d.dtypes[d.positions]);
  if (d.useCache) {
    feeds[d.useCache] = ints([capacity !== undefined || past > 0 ? 1 : 0], [1], "bool");
  }
  // A shared buffer's mask is as wide as the capacity, and its present (the next past) as long.
  const shared = sharesBuffer(d, capacity);
  const width = (capacity ?? past) + (shared ? 0 : s);
  // Which of the mask's entries are real: the packed layout's first past + s; the appended
  // layout's valid past and the new entries after the whole capacity.
  const valid = (j: number) => d.layout === "appended" ? j < past || j >= width - s : j < past + s;
  if (d.mask) {
    feeds[d.mask] = ints(
      int32s(width, (j) => +valid(j)),
      [1, width],
      d.dtypes[d.mask],
    );
  }
  if (capacity !== undefined && !shared) {
    // Slot j of the next past keeps its entry, except the new entries' slots after the valid
    // past, which take new entry j − past (the present's last s, after the whole capacity).
    const taken = (j: number) => d.layout === "appended" && j >= past && j < past + s;
    feeds[STEP.slots] = ints(int32s(capacity, (j) => (taken(j) ? j - past : 0)), [capacity], "i64");
    feeds[STEP.kept] = ints(int32s(capacity, (j) => +!taken(j)), [1, 1, capacity, 1], "bool");
  }
  return feeds;
}

/**
 * Whether a step's present caches are its next past as they are (`StepForm.shared`): a packed
 * cache kept at a capacity, as ONNX Runtime's GroupQueryAttention shares its past and present.
 */
export function sharesBuffer(d: Decoder, capacity: number | undefined): boolean {
  return capacity !== undefined && d.layout === "packed";
}

/** Empty caches: `capacity` zero entries each (none without a capacity). */
export function emptyCaches(d: Decoder, capacity: number | undefined): Record<string, HostTensor> {
  const out: Record<string, HostTensor> = {};
  for (const c of d.caches) {
    const shape = [1, c.heads, capacity ?? 0, c.headSize];
    out[c.past] = {
      data: allocate(c.dtype, c.heads * (capacity ?? 0) * c.headSize),
      shape,
      dtype: c.dtype,
    } as HostTensor;
  }
  return out;
}

/** `length` values of `value` in an Int32Array. */
function int32s(length: number, value: (j: number) => number): Int32Array {
  const out = new Int32Array(length);
  for (let j = 0; j < length; j++) out[j] = value(j);
  return out;
}

/**
 * A tensor of `values` for an input of `dtype`: an i64 input's as i32 data, which the boundary
 * takes for it (kiln computes i64 as i32), other dtypes as `fromNumbers` stores them (an f16 mask
 * as its bits). Widened to BigInts, a capacity-wide mask was narrowed back at every step: 221 µs a
 * step at a capacity of 4096 on the 2-core VM.
 */
function ints(values: ArrayLike<number>, shape: number[], dtype: BoundaryDType): HostTensor {
  if (dtype === "i64") {
    const data = values instanceof Int32Array ? values : Int32Array.from(values);
    return { data, shape, dtype: "i32" };
  }
  return { data: fromNumbers(internalDType(dtype), values), shape, dtype };
}
