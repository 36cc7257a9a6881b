import assert from "node:assert/strict";
import { decode, encode, MESSAGES } from "./proto_codec.ts";
import { decodeModel, encodeModel, tensorOf } from "./proto.ts";
import { KilnError } from "../../jit/support/errors.ts";
import { MODEL_NAMES, referenceModel } from "../testdata.ts";

Deno.test("ONNX models decode, re-encode and decode to the same messages", async () => {
  for (const name of MODEL_NAMES) {
    const { bytes } = await referenceModel(name);
    const model = decodeModel(bytes);
    assert.ok(model.graph.node.length > 0 && model.graph.initializer.length > 0, name);
    assert.deepEqual(decodeModel(encodeModel(model)), model, name);
  }
});

Deno.test("scalars: negative and 64-bit ints, packed and unpacked repeats, defaults, unknown fields", () => {
  const tensor = {
    dims: [3, 0, 2 ** 40],
    dataType: 7,
    int64Data: [-1, 2 ** 53 - 1, -(2 ** 31)],
    floatData: [1.5, -0],
    name: "t",
  };
  const back = decode(MESSAGES.tensor, encode(MESSAGES.tensor, tensor));
  assert.deepEqual(back.dims, [3, 0, 2 ** 40]);
  assert.deepEqual(back.int64Data, [-1, 2 ** 53 - 1, -(2 ** 31)]);
  assert.deepEqual(back.floatData, [1.5, -0]);
  assert.equal(back.name, "t");
  assert.deepEqual(back.rawData, new Uint8Array());
  assert.deepEqual(back.doubleData, []);
  // dims written unpacked (field 1, varint 5), then packed (field 1, length 2: 6, 7); an unknown
  // field 99 (varint) and an unknown field 98 (fixed32) are skipped.
  const bytes = new Uint8Array([0x08, 5, 0x0a, 2, 6, 7, 0x98, 0x06, 1, 0x95, 0x06, 1, 2, 3, 4]);
  assert.deepEqual(decode(MESSAGES.tensor, bytes).dims, [5, 6, 7]);
});

Deno.test("malformed bytes are errors, not hangs or wrong messages", () => {
  const bad = [
    new Uint8Array([0x0a]), // a length-delimited field without its length
    new Uint8Array([0x42, 10, 1]), // name: 10 bytes announced, 1 there
    new Uint8Array([0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]),
    new Uint8Array([0x0f]), // wire type 7
    new Uint8Array([0x25, 0, 0]), // float_data as a truncated fixed32
    new Uint8Array([0x42, 2, 0xc3, 0x28]), // name: invalid UTF-8
  ];
  for (const b of bad) assert.throws(() => decode(MESSAGES.tensor, b), Error, `${b}`);
});

Deno.test("int16 and uint16 tensors are i16 and u16; uint64 is held in u32, refused past 2^32 - 1", () => {
  const raw = (bytes: number[]) => new Uint8Array(bytes);
  const i16 = tensorOf({ dataType: 5, dims: [2], rawData: raw([0xff, 0xff, 0x02, 0x00]) }, "t");
  assert.ok(i16.data instanceof Int16Array);
  assert.deepEqual([i16.dtype, [...i16.data]], ["i16", [-1, 2]]);
  const u16 = tensorOf({ dataType: 4, dims: [2], rawData: raw([0xff, 0xff, 0x02, 0x00]) }, "t");
  assert.ok(u16.data instanceof Uint16Array);
  assert.deepEqual([u16.dtype, [...u16.data]], ["u16", [65535, 2]]);
  const u64 = tensorOf({ dataType: 13, dims: [1], uint64Data: [4294967295] }, "t");
  assert.deepEqual([u64.dtype, [...u64.data]], ["u32", [4294967295]]);
  const big = new Uint8Array(8);
  big[4] = 1; // 2^32, little-endian
  assert.throws(
    () => tensorOf({ dataType: 13, dims: [1], rawData: big }, "t"),
    (e) => e instanceof KilnError && /past 2\^32 - 1/.test(e.message) && /Fix:/.test(e.message),
  );
});

Deno.test("int64 tensors: the exporters' end sentinels saturate to i32, other values past it are refused", () => {
  const raw = (...values: bigint[]) => {
    const bytes = new Uint8Array(8 * values.length);
    values.forEach((v, i) => new DataView(bytes.buffer).setBigInt64(8 * i, v, true));
    return bytes;
  };
  const max = 9223372036854775807n;
  const t = tensorOf({ dataType: 7, dims: [4], rawData: raw(max, -max, -max - 1n, -5n) }, "t");
  assert.deepEqual([t.dtype, [...t.data]], ["i32", [2147483647, -2147483648, -2147483648, -5]]);
  assert.throws(
    () => tensorOf({ dataType: 7, dims: [1], rawData: raw(max - 1n) }, "t"),
    (e) =>
      e instanceof KilnError && /does not fit in i32/.test(e.message) && /Fix:/.test(e.message),
  );
});
