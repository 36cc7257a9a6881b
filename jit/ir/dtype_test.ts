/**
 * Boundary int64: data kiln holds int64 in, widened back to i64 for the caller.
 *
 * @module
 */
import assert from "node:assert/strict";
import { byteSize, isDType, widenToI64 } from "./dtype.ts";
import { KilnError } from "../support/errors.ts";

Deno.test("widenToI64 keeps every i32 as it is, its sign included", () => {
  const values = [0, 1, -1, 2, -2, 255, 65536, 2 ** 31 - 1, -(2 ** 31)];
  assert.deepEqual(Array.from(widenToI64(Int32Array.from(values))), values.map(BigInt));
});

Deno.test("widenToI64 of f64 data rounds toward zero, NaN to 0, past int64 to its ends", () => {
  const wide = widenToI64(Float64Array.from([2.7, -2.7, NaN, 2 ** 70, -(2 ** 70), 2 ** 40]));
  assert.deepEqual(Array.from(wide), [2n, -2n, 0n, 2n ** 63n - 1n, -(2n ** 63n), 2n ** 40n]);
});

Deno.test("byteSize and isDType know only kiln's dtypes, not an object's own keys", () => {
  // An unknown name had given undefined (and sizes NaN); "toString" passed as a dtype.
  assert.throws(
    () => byteSize("zz" as never),
    (e) => e instanceof KilnError && /"zz"/.test(e.message),
  );
  assert.equal(isDType("toString"), false);
  assert.throws(() => byteSize("toString" as never), KilnError);
  assert.equal(byteSize("f16"), 2);
});
