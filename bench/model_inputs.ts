/**
 * Made-up inputs for a model's runs in the bench tools (`first_runs.ts`, `profile_model.ts`,
 * `gpu_model_time.ts`): symbolic dimensions 1, integer inputs as i64 ids and the rest as f32, each
 * element from the tool's rule, or a raw little-endian file's bytes where one is named.
 *
 * @module
 */
import type { OnnxInputInfo, TensorMap } from "../mod.ts";

/** How {@linkcode madeInputs} fills the inputs. */
export interface MadeInputs {
  /** An id input's element `i` (default 0). */
  readonly id?: (i: number) => bigint;
  /** A float input's element `i` (default 0). */
  readonly float?: (i: number) => number;
  /** Files of raw little-endian data by input name, read in place of the rule. */
  readonly files?: Readonly<Record<string, string>>;
}

/** Inputs for every one of `inputs` (a model's), filled as `how` says. */
export async function madeInputs(
  inputs: readonly OnnxInputInfo[],
  how: MadeInputs = {},
): Promise<TensorMap> {
  const made: TensorMap = {};
  for (const info of inputs) {
    const shape = info.dims.map((d) => (typeof d === "number" ? d : 1));
    const n = shape.reduce((a, b) => a * b, 1);
    const file = how.files?.[info.name];
    const bytes = file ? (await Deno.readFile(file)).buffer : undefined;
    made[info.name] = info.dtype === "i64"
      ? {
        data: bytes
          ? new BigInt64Array(bytes)
          : BigInt64Array.from({ length: n }, (_, i) => how.id?.(i) ?? 0n),
        shape,
        dtype: "i64",
      }
      : {
        data: bytes
          ? new Float32Array(bytes)
          : Float32Array.from({ length: n }, (_, i) => how.float?.(i) ?? 0),
        shape,
        dtype: "f32",
      };
  }
  return made;
}
