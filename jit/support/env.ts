/**
 * Environment variables in Deno and Node alike, without throwing where the runtime has none or
 * withholds the permission: kiln's settings (`KILN_CACHE_DIR`, `KILN_ALLOW_SOFTWARE_GPU`) are
 * optional, so an unreadable one reads as unset.
 *
 * @module
 */

/** The value of environment variable `name`, or `undefined` when unset or unreadable. */
export function envVar(name: string): string | undefined {
  try {
    const g = globalThis as {
      Deno?: { env: { get(k: string): string | undefined } };
      process?: { env: Record<string, string | undefined> };
    };
    return g.Deno ? g.Deno.env.get(name) : g.process?.env[name];
  } catch {
    return undefined;
  }
}
