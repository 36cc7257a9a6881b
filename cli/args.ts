/**
 * The CLI's argument forms that its commands share: `NAME=VALUE` lists, shapes, run counts and
 * `--gpu` (with the note that points at it). Each bad value is a {@linkcode KilnError} with a
 * `Fix:`.
 *
 * @module
 */
import { defaultBackends } from "../backends/registry.ts";
import { WebGpuBackend } from "../backends/webgpu/webgpu_backend.ts";
import { isGpuName } from "../backends/webgpu/gpu_choice.ts";
import type { DeviceProfile } from "../jit/runtime/backend.ts";
import { KilnError } from "../jit/support/errors.ts";

/** `NAME=VALUE` items of `flag` as a map (a typed error for any other form). */
export function pairs(list: string[] | undefined, flag: string): Map<string, string> {
  const out = new Map<string, string>();
  for (const item of list ?? []) {
    const eq = item.indexOf("=");
    if (eq <= 0) {
      throw new KilnError(`${flag} ${item} is not NAME=VALUE`, {
        code: "usage",
        fix: `write ${flag} x=path/to/file`,
      });
    }
    out.set(item.slice(0, eq), item.slice(eq + 1));
  }
  return out;
}

/** `--shape NAME=2x3`'s value as dimensions. */
export function parseShape(text: string, name: string): number[] {
  const parts = text.split(/[x,]/);
  const dims = parts.map(Number);
  // Each part a whole number as written: "2x" is not [2, 0], nor "1e3" a thousand.
  if (!text || parts.some((p) => !/^\d+$/.test(p)) || dims.some((d) => !Number.isSafeInteger(d))) {
    throw new KilnError(`--shape ${name}=${text} is not a shape`, {
      code: "usage",
      fix: "write e.g. --shape x=2x16x128",
    });
  }
  return dims;
}

/** `--runs` (or `flag`) as a positive integer, or a usage error for `kiln command`. */
export function runCount(
  command: string,
  value: string | undefined,
  example: number,
  flag = "--runs",
): number {
  const runs = Number(value);
  if (!/^\d+$/.test(value ?? "") || !Number.isSafeInteger(runs) || runs < 1) {
    throw new KilnError(`${flag} of kiln ${command} must be a positive integer, got ${value}`, {
      code: "usage",
      fix: `pass e.g. ${flag} ${example}`,
    });
  }
  return runs;
}

/**
 * The `kiln:` line of an error from Node's argument parser (its own text runs over several lines
 * and speaks of `--` separators): an unknown option, or an option given without its value (a
 * negative number reads as another option).
 */
export function optionError(e: { code?: string; message?: string }, command: string): string {
  const quoted = /'(-[^' ]+)/.exec(e.message ?? "")?.[1] ?? "";
  if (e.code === "ERR_PARSE_ARGS_UNKNOWN_OPTION") {
    return `kiln ${command}: unknown option ${quoted}. Fix: see kiln ${command} --help`;
  }
  if (e.code === "ERR_PARSE_ARGS_INVALID_OPTION_VALUE") {
    return `kiln ${command}: ${quoted} needs a value. Fix: write ${quoted} VALUE (a value starting with - as ${quoted}=VALUE)`;
  }
  const first = (e.message ?? "").split("\n")[0];
  return `kiln ${command}: ${first}. Fix: see kiln ${command} --help`;
}

/**
 * Takes `--gpu dawn|navigator` out of `args`: the default registry's webgpu backend then uses
 * that WebGPU implementation.
 */
export function useGpu(args: string[]): void {
  const at = args.findIndex((a) => a === "--gpu" || a.startsWith("--gpu="));
  if (at < 0) return;
  const [value] = args[at].includes("=")
    ? [args[at].slice(6), args.splice(at, 1)]
    : [args[at + 1], args.splice(at, 2)];
  if (!isGpuName(value)) {
    throw new KilnError(`--gpu ${value ?? ""} names no WebGPU implementation`, {
      code: "usage",
      fix: "pass --gpu dawn, --gpu navigator or --gpu auto",
    });
  }
  defaultBackends().register(new WebGpuBackend({ gpu: value }), { replace: true });
}

/**
 * A note for `kiln run` where work ran on a hardware GPU through an implementation whose every
 * readback waits `readbackMs` (Deno's WebGPU sleeps 10 ms in each `mapAsync`): Dawn's takes
 * 0.035 ms on the H200, and kiln's webgpu runs there took 0.010-0.085 of ONNX Runtime's.
 */
export function readbackNote(profile: DeviceProfile): string | undefined {
  if (profile.software || (profile.readbackMs ?? 0) < 5 || profile.name.endsWith("(Dawn)")) {
    return undefined;
  }
  return `note     every result this WebGPU reads back waits ${
    profile.readbackMs!.toFixed(1)
  } ms (Deno's mapAsync); --gpu dawn (KILN_GPU=dawn) runs on Dawn, the webgpu npm package, whose readbacks take well under a millisecond`;
}
