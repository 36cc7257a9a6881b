/**
 * `kiln explain --wat`: each wasm kernel of a compiled plan as WebAssembly text, through
 * Binaryen (the design's named code-generation library). Binaryen is loaded here only, by a
 * computed specifier: it is never on a run's path and never a dependency of the package, and a
 * machine that cannot fetch it gets a typed error that says so.
 *
 * @module
 */
import { defaultBackends } from "../backends/registry.ts";
import type { Executable } from "../jit/runtime/executable.ts";
import { KilnError } from "../jit/support/errors.ts";
import { optionalPackage } from "../jit/support/packages.ts";
import { BINARYEN_VERSION } from "../backends/wasm/optimizing_tier.ts";

/** The part of Binaryen's JavaScript API `--wat` uses. */
interface Binaryen {
  readBinary(
    bytes: Uint8Array,
  ): { setFeatures(f: number): void; emitText(): string; dispose(): void };
  readonly Features: { readonly All: number };
}

/** Binaryen, loaded once on first use. */
let loading: Promise<Binaryen> | undefined;

async function binaryen(): Promise<Binaryen> {
  const refuse = (e: unknown, deno: boolean) =>
    new KilnError(`Binaryen could not be loaded for --wat: ${String(e)}`, {
      code: "backend",
      fix: deno
        ? `allow Deno to fetch npm:binaryen@${BINARYEN_VERSION}, or leave out --wat`
        : `npm install binaryen@${BINARYEN_VERSION}, or leave out --wat`,
    });
  loading ??= optionalPackage<{ default?: Binaryen }>("binaryen", BINARYEN_VERSION, refuse).then(
    (m) => (m.default ?? m) as Binaryen,
    (e) => {
      loading = undefined;
      throw e;
    },
  );
  return await loading;
}

/** Each wasm kernel of `exe`'s plan as `;; kernel NAME` and its module's text. */
export async function watOf(exe: Executable): Promise<string> {
  const plan = exe.plan;
  const placed = plan
    ? plan.kernels.filter((_, i) =>
      plan.schedule.placement[i] === "wasm" && !plan.kernels[i].opaque
    )
    : [];
  if (!placed.length) {
    throw new KilnError("--wat shows wasm kernels, and this plan runs none on wasm", {
      code: "usage",
      fix: "pass --backend wasm (or a model auto places on the CPU)",
    });
  }
  const wasm = defaultBackends().get("wasm");
  const b = await binaryen();
  const texts: string[] = [];
  for (const k of placed) {
    const bytes = await wasm.codegen!.generate(k) as Uint8Array;
    const mod = b.readBinary(bytes);
    mod.setFeatures(b.Features.All);
    texts.push(`;; kernel ${k.name} (${k.ops.join(", ")})\n${mod.emitText()}`);
    mod.dispose();
  }
  return texts.join("\n");
}
