/**
 * When kiln's matrix kernels may run: the device's subgroup-matrix feature, a 16×16×16 f16 → f32
 * configuration and `shader-f16` (or, for products over bytes, a 16×16×32 i8 → i32 one), and
 * subgroups of exactly 32 (CI's adapters have none of this, so the
 * decision is checked on stand-ins of Dawn's H200 adapter).
 *
 * @module
 */
import assert from "node:assert/strict";
import { byteMatricesUsable, MATRIX_FEATURE, matrixUnitsUsable } from "./device_profile.ts";

/** Dawn's H200 adapter and device as kiln sees them, with `change` applied. */
function h200(
  change: { features?: string[]; sizes?: [number, number]; configs?: object[] } = {},
): [GPUAdapter, GPUDevice] {
  const configs = change.configs ?? [
    { M: 16, N: 16, K: 16, componentType: "f16", resultComponentType: "f16" },
    { M: 16, N: 16, K: 16, componentType: "f16", resultComponentType: "f32" },
    { M: 16, N: 16, K: 32, componentType: "u8", resultComponentType: "u32" },
    { M: 16, N: 16, K: 32, componentType: "i8", resultComponentType: "i32" },
  ];
  const [min, max] = change.sizes ?? [32, 32];
  const info = { subgroupMinSize: min, subgroupMaxSize: max, subgroupMatrixConfigs: configs };
  const features = new Set(change.features ?? ["shader-f16", "subgroups", MATRIX_FEATURE]);
  return [{ info } as unknown as GPUAdapter, { features } as unknown as GPUDevice];
}

Deno.test("matrix units are used with the feature, 16x16x16 f16 -> f32, shader-f16 and subgroups of 32", () => {
  assert.equal(matrixUnitsUsable(...h200()), true);
  assert.equal(matrixUnitsUsable(...h200({ features: ["shader-f16", "subgroups"] })), false);
  assert.equal(matrixUnitsUsable(...h200({ features: ["subgroups", MATRIX_FEATURE] })), false);
  assert.equal(matrixUnitsUsable(...h200({ sizes: [16, 32] })), false, "subgroups of 16 or 32");
  assert.equal(matrixUnitsUsable(...h200({ sizes: [64, 64] })), false);
  const f16Only = [{ M: 16, N: 16, K: 16, componentType: "f16", resultComponentType: "f16" }];
  assert.equal(matrixUnitsUsable(...h200({ configs: f16Only })), false, "f16 sums only");
  const small = [{ M: 16, N: 8, K: 16, componentType: "f16", resultComponentType: "f32" }];
  assert.equal(matrixUnitsUsable(...h200({ configs: small })), false);
  assert.equal(matrixUnitsUsable(undefined, undefined), false);
});

Deno.test("products over bytes use the units with the feature, 16x16x32 i8 -> i32 and subgroups of 32", () => {
  assert.equal(byteMatricesUsable(...h200()), true);
  // No f16 needed: the byte kernels multiply signed bytes.
  assert.equal(byteMatricesUsable(...h200({ features: ["subgroups", MATRIX_FEATURE] })), true);
  assert.equal(byteMatricesUsable(...h200({ features: ["shader-f16", "subgroups"] })), false);
  assert.equal(byteMatricesUsable(...h200({ sizes: [16, 32] })), false, "subgroups of 16 or 32");
  const unsigned = [{ M: 16, N: 16, K: 32, componentType: "u8", resultComponentType: "u32" }];
  assert.equal(byteMatricesUsable(...h200({ configs: unsigned })), false, "u8 only");
  const narrow = [{ M: 16, N: 8, K: 32, componentType: "i8", resultComponentType: "i32" }];
  assert.equal(byteMatricesUsable(...h200({ configs: narrow })), false);
  assert.equal(byteMatricesUsable(undefined, undefined), false);
});
