/**
 * The edge-case sweep: every node model of the ONNX backend test suite, run as the suite gives it
 * and in variants at the edges (float inputs full of NaN, ±0, ±Infinity, values near the f32
 * limits and subnormals; each integer attribute negated, zeroed and made huge), on kiln's backends
 * and on ONNX Runtime Web (wasm) side by side. Each pair ends as:
 *
 * - `agree`: both answered the same (NaN matching NaN), or both refused;
 * - `kiln-refused`: kiln gave a typed `KilnError` where ONNX Runtime answered (allowed, listed);
 * - `kiln-accepted`: kiln answered where ONNX Runtime refused (listed: the answer must be right);
 * - `differ`: both answered, differently (a bug unless ONNX leaves the case undefined);
 * - `untyped`: kiln threw something other than a `KilnError` (a bug).
 *
 *   deno run -A --config bench/deno.json bench/edge_sweep.ts [--backends reference,wasm,webgpu]
 *     [--filter REGEXP] [--data DIR] [--shard I/N] [--out FILE]
 *
 * `--shard I/N` runs every Nth case from the Ith (for N processes side by side); `--data` names
 * the suite's `data` folder (default: what `../shared/onnx-conformance/fetch.sh` prints).
 *
 * @module
 */
import { execFileSync } from "node:child_process";
import { existsSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { KilnError, OnnxModel } from "../mod.ts";
import { fromF16Bits } from "../jit/ir/dtype.ts";
import type { HostTensor } from "../jit/ir/host_tensor.ts";
import {
  decodeModel,
  decodeTensor,
  encodeModel,
  type ModelProto,
  tensorOf,
} from "../onnx/wire/proto.ts";

// deno-lint-ignore no-explicit-any
type Any = any;
type Outcome = "agree" | "kiln-refused" | "kiln-accepted" | "differ" | "untyped";
type Answer = { values: Record<string, number[]> } | { refused: string; typed: boolean };

const SPECIAL = [NaN, -0, 0, Infinity, -Infinity, 3e38, -3e38, 1e-40, 1, -1];
// Copies (Uint8Array.from): a Node Buffer's slice is a view into a shared pool.
const ORT_TYPES: Record<number, [string, (b: Uint8Array, n: number) => unknown]> = {
  1: ["float32", (b, n) => new Float32Array(Uint8Array.from(b).buffer, 0, n)],
  6: ["int32", (b, n) => new Int32Array(Uint8Array.from(b).buffer, 0, n)],
  7: ["int64", (b, n) => new BigInt64Array(Uint8Array.from(b).buffer, 0, n)],
  9: ["bool", (b, n) => new Uint8Array(Uint8Array.from(b).buffer, 0, n)],
  2: ["uint8", (b, n) => new Uint8Array(Uint8Array.from(b).buffer, 0, n)],
  3: ["int8", (b, n) => new Int8Array(Uint8Array.from(b).buffer, 0, n)],
};

/** A case's inputs as raw little-endian tensors: name, ONNX type code, dims, bytes. */
interface RawInput {
  name: string;
  code: number;
  dims: number[];
  bytes: Uint8Array;
}

/** The suite's node cases with plain tensor inputs of the types both sides read. */
function cases(
  data: string,
  filter?: RegExp,
): { name: string; model: ModelProto; inputs: RawInput[] }[] {
  const root = join(data, "node");
  const out = [];
  for (const name of readdirSync(root).sort()) {
    if (filter && !filter.test(name)) continue;
    const dir = join(root, name);
    const set = join(dir, "test_data_set_0");
    if (!existsSync(join(dir, "model.onnx")) || !existsSync(set)) continue;
    const model = decodeModel(Uint8Array.from(readFileSync(join(dir, "model.onnx"))));
    const files = readdirSync(set).filter((f) => /^input_\d+\.pb$/.test(f))
      .sort((a, b) => Number(a.slice(6, -3)) - Number(b.slice(6, -3)));
    const inputs: RawInput[] = [];
    let plain = files.length > 0;
    for (const f of files) {
      const t = decodeTensor(Uint8Array.from(readFileSync(join(set, f))), f);
      const code = t.dataType ?? 0;
      if (!ORT_TYPES[code] || !t.rawData?.byteLength) plain = false;
      else {inputs.push({
          name: t.name ?? "",
          code,
          dims: (t.dims ?? []).map(Number),
          bytes: t.rawData,
        });}
    }
    if (plain && inputs.every((i) => i.name)) out.push({ name, model, inputs });
  }
  return out;
}

/** The variants of one case: as given, special floats, each integer attribute at its edges. */
function variants(model: ModelProto, inputs: RawInput[]) {
  const list: { what: string; model: ModelProto; inputs: RawInput[] }[] = [{
    what: "as given",
    model,
    inputs,
  }];
  if (inputs.some((i) => i.code === 1)) {
    list.push({
      what: "special floats",
      model,
      inputs: inputs.map((i) => {
        if (i.code !== 1) return i;
        const n = i.bytes.byteLength / 4;
        const f = Float32Array.from({ length: n }, (_, k) => SPECIAL[k % SPECIAL.length]);
        return { ...i, bytes: new Uint8Array(f.buffer) };
      }),
    });
  }
  const node = model.graph.node[0];
  for (const [a, attr] of (node?.attribute ?? []).entries()) {
    if (attr.type !== 2 && attr.type !== 7) continue;
    for (
      const [label, f] of [["negated", (v: number) => -v - 1], ["zero", () => 0], [
        "huge",
        () => 1 << 30,
      ]] as const
    ) {
      const copy = decodeModel(encodeModel(model));
      const target = copy.graph.node[0].attribute[a];
      if (attr.type === 2) target.i = f(Number(attr.i ?? 0));
      else target.ints = (attr.ints ?? []).map((v) => f(Number(v)));
      list.push({ what: `${attr.name} ${label}`, model: copy, inputs });
    }
  }
  return list;
}

function numbers(data: ArrayLike<number | bigint>): number[] {
  return Array.from(data, Number);
}

async function kilnAnswer(bytes: Uint8Array, inputs: RawInput[], backend: string): Promise<Answer> {
  try {
    const feeds: Record<string, HostTensor> = {};
    for (const i of inputs) {
      feeds[i.name] = tensorOf(
        { name: i.name, dims: i.dims, dataType: i.code, rawData: i.bytes },
        i.name,
      );
      if (i.code === 7) {
        const t = feeds[i.name];
        feeds[i.name] = {
          data: BigInt64Array.from(t.data as Int32Array, BigInt),
          shape: t.shape,
          dtype: "i64",
        };
      }
    }
    const model = OnnxModel.fromBytes(bytes);
    try {
      const out = await model.run(feeds, { backend, cache: false });
      return {
        values: Object.fromEntries(
          Object.entries(out).map((
            [k, t],
          ) => [
            k,
            t.dtype === "f16"
              ? Array.from(t.data as Uint16Array, fromF16Bits)
              : numbers(t.data as ArrayLike<number>),
          ]),
        ),
      };
    } finally {
      model.dispose();
    }
  } catch (e) {
    return {
      refused: String((e as Error)?.message ?? e).split("\n")[0].slice(0, 200),
      typed: e instanceof KilnError,
    };
  }
}

async function ortAnswer(ort: Any, bytes: Uint8Array, inputs: RawInput[]): Promise<Answer> {
  try {
    const session = await ort.InferenceSession.create(bytes);
    const feeds: Record<string, unknown> = {};
    for (const i of inputs) {
      const [type, make] = ORT_TYPES[i.code];
      const n = i.dims.reduce((a, b) => a * b, 1);
      feeds[i.name] = new ort.Tensor(type, make(i.bytes, n), i.dims);
    }
    const out = await session.run(feeds);
    // Read before release: the outputs may live in the session's memory.
    const values = Object.fromEntries(
      Object.entries(out).map((
        [k, t],
      ) => [
        k,
        (t as Any).type === "float16" && (t as Any).data instanceof Uint16Array
          ? Array.from((t as Any).data as Uint16Array, fromF16Bits)
          : numbers((t as Any).data),
      ]),
    );
    await session.release();
    return { values };
  } catch (e) {
    return {
      refused: String((e as Error)?.message ?? e).split("\n")[0].slice(0, 200),
      typed: true,
    };
  }
}

function same(a: number, b: number): boolean {
  if (Number.isNaN(a) || Number.isNaN(b)) return Number.isNaN(a) && Number.isNaN(b);
  if (!Number.isFinite(a) || !Number.isFinite(b)) return a === b;
  return Math.abs(a - b) <= 1e-4 + 1e-3 * Math.abs(b);
}

/** `xs` in ascending order (NaN last): outputs whose order the model leaves free. */
const ordered = (xs: number[]) =>
  [...xs].sort((a, b) => (Number.isNaN(a) ? 1 : Number.isNaN(b) ? -1 : a - b));

function judge(kiln: Answer, ort: Answer, orderFree = false): Outcome {
  if ("refused" in kiln && !kiln.typed) return "untyped";
  if ("refused" in kiln) return "refused" in ort ? "agree" : "kiln-refused";
  if ("refused" in ort) return "kiln-accepted";
  for (const [name, wanted] of Object.entries(ort.values)) {
    const [got, want] = orderFree
      ? [kiln.values[name] && ordered(kiln.values[name]), ordered(wanted)]
      : [kiln.values[name], wanted];
    if (!got || got.length !== want.length || got.some((v, i) => !same(v, want[i]))) {
      if (Deno.env.get("SWEEP_DEBUG")) {
        const i = got ? got.findIndex((v, k) => !same(v, want[k])) : 0;
        console.log(name, i, got?.slice(i, i + 4), want.slice(i, i + 4));
      }
      return "differ";
    }
  }
  return "agree";
}

async function main() {
  const { values } = parseArgs({
    args: Deno.args,
    options: {
      backends: { type: "string", default: "reference,wasm" },
      filter: { type: "string" },
      out: { type: "string", default: "bench/edge-sweep.json" },
      data: { type: "string" },
      shard: { type: "string", default: "0/1" },
    },
  });
  const data = values.data ??
    execFileSync("bash", ["../shared/onnx-conformance/fetch.sh"], { encoding: "utf8" }).trim();
  const [shard, shards] = values.shard.split("/").map(Number);
  const ort: Any = await import("npm:onnxruntime-web@1.30.0");
  ort.env.wasm.numThreads = 1;
  ort.env.logLevel = "fatal";
  const backends = values.backends.split(",");
  const counts: Record<string, Record<Outcome, number>> = {};
  const examples: Record<string, string[]> = {};
  let total = 0;
  const all = cases(data, values.filter ? new RegExp(values.filter) : undefined);
  for (const [n, c] of all.entries()) {
    if (n % shards !== shard) continue;
    console.error(`edge sweep: case ${n + 1} of ${all.length}: ${c.name}`);
    for (const v of variants(c.model, c.inputs)) {
      const bytes = encodeModel(v.model);
      const want = await ortAnswer(ort, bytes, v.inputs);
      for (const backend of backends) {
        // TopK with sorted != 1 may return its k elements in any order.
        const free = v.what.startsWith("sorted") && !v.what.endsWith("huge");
        const outcome = judge(await kilnAnswer(bytes, v.inputs, backend), want, free);
        (counts[backend] ??= {
          agree: 0,
          "kiln-refused": 0,
          "kiln-accepted": 0,
          differ: 0,
          untyped: 0,
        })[outcome]++;
        if (outcome !== "agree") {
          (examples[`${backend} ${outcome}`] ??= []).push(`${c.name}: ${v.what}`);
        }
      }
      total++;
    }
  }
  const summary = { variants: total, counts, examples };
  writeFileSync(values.out, JSON.stringify(summary, null, 2) + "\n");
  console.log(JSON.stringify({ variants: total, counts }));
}

if (import.meta.main) await main();
