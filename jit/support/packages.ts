/**
 * Optional npm packages kiln loads only when a feature asks for one (Dawn's `webgpu`, Binaryen for
 * `--wat`, Hugging Face's tokenizers for `--prompt`): `npm:NAME@VERSION` under Deno, the installed
 * `NAME` under Node, through a computed specifier so that neither `deno pack` nor a bundler makes
 * it a dependency of kiln's.
 *
 * @module
 */
import type { KilnError } from "./errors.ts";

/** Whether this is Deno (else Node or a browser). */
export const IS_DENO: boolean = typeof (globalThis as { Deno?: unknown }).Deno !== "undefined";

/**
 * Package `name` (`version` under Deno), or the typed error `refuse` makes of the failure (told
 * whether this is Deno, so its Fix can say how to get the package here).
 */
export async function optionalPackage<T>(
  name: string,
  version: string,
  refuse: (error: unknown, deno: boolean) => KilnError,
): Promise<T> {
  const specifier = IS_DENO ? ["npm", `${name}@${version}`].join(":") : name;
  try {
    return await import(specifier) as T;
  } catch (e) {
    throw refuse(e, IS_DENO);
  }
}
