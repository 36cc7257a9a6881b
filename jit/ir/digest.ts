/**
 * A fast, synchronous 128-bit non-cryptographic digest (four 32-bit multiply–rotate lanes with a
 * murmur3 finalizer) for structural hashes and constant bytes. Synchronous because hashing sits on
 * the compile path of the lazy Tensor API; self-contained because `node:crypto` is missing in
 * browsers. Collisions are not trusted anyway: caches compare canonical forms.
 *
 * @module
 */

const encoder = new TextEncoder();

function fmix(h: number): number {
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  return (h ^ (h >>> 16)) >>> 0;
}

const rotl = (x: number, r: number): number => (x << r) | (x >>> (32 - r));

/** 32 hex characters digesting `input` (a string is hashed as UTF-8). */
export function digest(input: string | ArrayBufferView): string {
  const bytes = typeof input === "string"
    ? encoder.encode(input)
    : new Uint8Array(input.buffer, input.byteOffset, input.byteLength);
  let h1 = 0x9747b28c, h2 = 0x85ebca6b, h3 = 0xc2b2ae35, h4 = 0x27d4eb2f;
  const words = bytes.byteLength >>> 2;
  const aligned = bytes.byteOffset % 4 === 0;
  const view = aligned ? new Uint32Array(bytes.buffer, bytes.byteOffset, words) : undefined;
  const dv = aligned ? undefined : new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  for (let i = 0; i < words; i++) {
    const w = view ? view[i] : dv!.getUint32(i * 4, true);
    switch (i & 3) {
      case 0:
        h1 = Math.imul(rotl(h1 ^ Math.imul(w, 0xcc9e2d51), 13), 5) + 0xe6546b64;
        break;
      case 1:
        h2 = Math.imul(rotl(h2 ^ Math.imul(w, 0x1b873593), 15), 5) + 0x561ccd1b;
        break;
      case 2:
        h3 = Math.imul(rotl(h3 ^ Math.imul(w, 0x38b34ae5), 17), 5) + 0x0bcaa747;
        break;
      default:
        h4 = Math.imul(rotl(h4 ^ Math.imul(w, 0xa1e38b93), 19), 5) + 0x32ac3b17;
    }
  }
  let tail = 0;
  for (let i = words * 4; i < bytes.byteLength; i++) tail = (tail << 8) | bytes[i];
  h1 ^= Math.imul(tail, 0xcc9e2d51);
  const n = bytes.byteLength;
  h1 = fmix(h1 ^ n ^ h2);
  h2 = fmix(h2 ^ n ^ h1);
  h3 = fmix(h3 ^ n ^ h2);
  h4 = fmix(h4 ^ n ^ h3);
  h1 = fmix(h1 ^ h4);
  return [h1, h2, h3, h4].map((h) => (h >>> 0).toString(16).padStart(8, "0")).join("");
}

/** The bytes of `view` in hex, two characters each: an exact key, where `digest` is a hash. */
export function hexBytes(view: ArrayBufferView): string {
  const bytes = new Uint8Array(view.buffer, view.byteOffset, view.byteLength);
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}
