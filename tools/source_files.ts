/**
 * The repository's TypeScript sources, as the house and layers tests read them: every `.ts`
 * file below the root, by path from it, build outputs and the device cache left out.
 *
 * @module
 */
import { readdirSync } from "node:fs";
import { dirname, join, relative } from "node:path";

/** The repository root. */
export const ROOT: string = dirname(dirname(new URL(import.meta.url).pathname));

const SKIP = new Set(["node_modules", ".git", ".device", "dist"]);

/** Every `.ts` file below `dir` (default: the root), by path from the root. */
export function sources(dir: string = ROOT): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    if (SKIP.has(e.name)) return [];
    const path = join(dir, e.name);
    if (e.isDirectory()) return sources(path);
    return e.name.endsWith(".ts") ? [relative(ROOT, path)] : [];
  });
}
