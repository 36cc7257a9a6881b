/**
 * Outputs delivered into the caller's memory: `run(inputs, { into: { y: buffer } })` fills the
 * caller's typed array (of the output's dtype and size) instead of returning a fresh one, so a
 * loop that runs a model again and again allocates nothing per run. Checked before the run: a
 * wrong name, dtype or size is a typed error and the caller's buffer is left as it was.
 *
 * @module
 */
import { matchesDType, type TensorData } from "../ir/dtype.ts";
import { KilnError, shown } from "../support/errors.ts";
import type { Graph } from "../ir/graph.ts";
import type { HostTensor } from "../ir/host_tensor.ts";
import { sizeOf } from "../ir/shape.ts";

/** Caller-owned buffers by output name. */
export type IntoMap = Readonly<Record<string, TensorData>>;

/**
 * Checks `into` against the outputs a run returns: each a returned output's name, a typed array
 * of its dtype and of at least its size (a bucketed run fills the front of it).
 */
export function checkInto(graph: Graph, into: IntoMap | undefined, returned: readonly number[]) {
  if (into !== undefined && (typeof into !== "object" || into === null || Array.isArray(into))) {
    throw new KilnError(`into is ${shown(into)}, not a map of output names to buffers`, {
      code: "bad-input",
      fix: "pass e.g. { into: { y: new Float32Array(n) } }, or leave it out",
    });
  }
  const seen: { name: string; view: ArrayBufferView }[] = [];
  for (const [name, buffer] of Object.entries(into ?? {})) {
    const o = returned.map((i) => graph.outputs[i]).find((x) => x.name === name);
    const fail = (why: string, fix: string) =>
      new KilnError(`into.${name}: ${why}`, { code: "bad-input", fix });
    if (!o) {
      throw fail(
        "the run returns no such output",
        "name outputs the run returns (options.outputs)",
      );
    }
    const size = sizeOf(graph.values[o.value].shape);
    if (!ArrayBuffer.isView(buffer) || !matchesDType(buffer, o.dtype)) {
      throw fail(`the buffer is not a typed array of ${o.dtype}`, `pass a ${o.dtype} typed array`);
    }
    if (buffer.length < size) {
      throw fail(
        `${buffer.length} elements, where the output has ${size}`,
        `pass ${size} elements`,
      );
    }
    // Two outputs over the same bytes: the later one's values had silently replaced the earlier's.
    const other = overlapping(seen, buffer);
    if (other !== undefined) {
      throw fail(`its bytes are also into.${other}'s`, "give each output a buffer of its own");
    }
    seen.push({ name, view: buffer });
  }
}

/** The name of a buffer in `seen` whose bytes `view` shares, if one does. */
function overlapping(
  seen: readonly { name: string; view: ArrayBufferView }[],
  view: ArrayBufferView,
): string | undefined {
  const end = view.byteOffset + view.byteLength;
  return seen.find(({ view: v }) =>
    v.buffer === view.buffer && v.byteOffset < end && view.byteOffset < v.byteOffset + v.byteLength
  )?.name;
}

/**
 * The caller's buffers by position in `wanted` (graph output indices), for the program to read
 * those outputs straight into (`Program.run`'s `into`); undefined where none was given.
 */
export function intoTargets(
  graph: Graph,
  into: IntoMap | undefined,
  wanted: readonly number[],
): (TensorData | undefined)[] | undefined {
  if (!into) return undefined;
  return wanted.map((i) => into[graph.outputs[i].name]);
}

/**
 * `t` copied into the caller's buffer for its output, where one was given and the program did
 * not already read the output into it.
 */
export function deliver(name: string, t: HostTensor, into: IntoMap | undefined): HostTensor {
  const buffer = into?.[name];
  if (!buffer || t.data === buffer) return t;
  (buffer as Float32Array).set(t.data as Float32Array);
  return { ...t, data: buffer };
}
