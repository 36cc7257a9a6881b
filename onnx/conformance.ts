/**
 * One case of the ONNX backend test suite (`CASE/model.onnx`, `CASE/test_data_set_0/input_K.pb`
 * and `output_K.pb`) run on one kiln backend and compared the way ONNX's own runner compares:
 * `|actual − expected| ≤ 1e-7 + 1e-3·|expected|`, NaN equal to NaN, integers and bools exact.
 * The outcome is a pass or a one-line reason; `conformance_cli.ts` runs the suite.
 *
 * @module
 */
import { readdir, readFile } from "node:fs/promises";
import { join } from "node:path";
// Loading the public entry registers the built-in backends with the compiler.
import "../mod.ts";
import { KilnError } from "../jit/errors.ts";
import type { HostTensor } from "../jit/host_tensor.ts";
import { isClose, numbers } from "../jit/testing.ts";
import { OnnxModel } from "./model.ts";
import { decodeTensor, tensorOf } from "./proto.ts";

/** How one case ended. */
export interface CaseResult {
  /** The case's folder name (e.g. `test_abs`). */
  readonly name: string;
  /**
   * `pass`; `fail` (ran, wrong values or shapes); `error` (a typed `KilnError`: refused or
   * unsupported); `crash` (anything else thrown: a defect); `timeout` (set by the runner).
   */
  readonly status: "pass" | "fail" | "error" | "crash" | "timeout";
  /** Why it did not pass (empty for a pass). */
  readonly reason: string;
}

/** ONNX's tolerances for floating-point outputs. */
const RTOL = 1e-3, ATOL = 1e-7;

/** The tensors of `dir/test_data_set_0` named `prefix_K.pb`, in K order. */
async function tensors(dir: string, prefix: string): Promise<HostTensor[]> {
  const set = join(dir, "test_data_set_0");
  const files = (await readdir(set)).filter((f) => f.startsWith(`${prefix}_`) && f.endsWith(".pb"))
    .sort((a, b) =>
      Number(a.slice(prefix.length + 1, -3)) - Number(b.slice(prefix.length + 1, -3))
    );
  return await Promise.all(files.map(async (f) => {
    const proto = decodeTensor(new Uint8Array(await readFile(join(set, f))), `${prefix} ${f}`);
    return tensorOf(proto, f);
  }));
}

/** Why `got` does not match `want` (undefined when it does). */
export function mismatch(got: HostTensor, want: HostTensor, name: string): string | undefined {
  if (got.shape.join() !== want.shape.join()) {
    return `${name}: shape [${got.shape}] ≠ expected [${want.shape}]`;
  }
  const a = numbers(got.data, got.dtype === "f16"), e = numbers(want.data, want.dtype === "f16");
  // Integers and bools compare exactly.
  const [atol, rtol] = want.dtype === "f32" || want.dtype === "f16" ? [ATOL, RTOL] : [0, 0];
  const i = e.findIndex((y, k) => !isClose(a[k], y, atol, rtol));
  if (i >= 0) return `${name}[${i}] = ${a[i]}, expected ${e[i]}`;
  return undefined;
}

/** The first line of an error, shortened, for the report. */
function brief(e: unknown): string {
  const text = e instanceof Error ? e.message : String(e);
  const line = text.split("\n")[0].replace(/\s*Fix:.*$/, "");
  return line.length > 160 ? `${line.slice(0, 157)}…` : line;
}

/** Runs case folder `dir` on `backend` (`reference`, `wasm` or `webgpu`). */
export async function runCase(dir: string, backend: string): Promise<CaseResult> {
  const name = dir.split("/").at(-1)!;
  try {
    const model = OnnxModel.fromBytes(new Uint8Array(await readFile(join(dir, "model.onnx"))));
    const [inputs, outputs] = await Promise.all([tensors(dir, "input"), tensors(dir, "output")]);
    // Inputs are the graph's non-initializer inputs in order; a case may omit trailing optional ones.
    const feeds = Object.fromEntries(inputs.map((t, k) => [model.inputs[k]?.name ?? `#${k}`, t]));
    try {
      const result = await model.run(feeds, { backend, cache: false });
      for (const [k, want] of outputs.entries()) {
        const out = model.outputs[k];
        const got = result[out];
        if (!got) return { name, status: "fail", reason: `output ${out} missing` };
        const bad = mismatch(got, want, out);
        if (bad) return { name, status: "fail", reason: bad };
      }
    } finally {
      model.dispose();
    }
    return { name, status: "pass", reason: "" };
  } catch (e) {
    if (e instanceof KilnError) return { name, status: "error", reason: `${e.code}: ${brief(e)}` };
    const kind = e instanceof Error ? e.name : typeof e;
    return { name, status: "crash", reason: `${kind}: ${brief(e)}` };
  }
}
