/**
 * Runs the `kiln` command line in a process of its own, for the CLI's tests (not published).
 *
 * @module
 */

/** What a `kiln` process gave: its exit code and its output. */
export interface KilnRun {
  /** Exit code. */
  readonly code: number;
  /** Standard output. */
  readonly stdout: string;
  /** Standard error. */
  readonly stderr: string;
}

/** Runs `kiln ...args` with environment `env` added. */
export async function kilnWith(env: Record<string, string>, ...args: string[]): Promise<KilnRun> {
  const out = await new Deno.Command(Deno.execPath(), {
    env,
    args: ["run", "-A", new URL("./mod.ts", import.meta.url).pathname, ...args],
    stdout: "piped",
    stderr: "piped",
  }).output();
  const dec = new TextDecoder();
  return { code: out.code, stdout: dec.decode(out.stdout), stderr: dec.decode(out.stderr) };
}

/** Runs `kiln ...args`. */
export function kiln(...args: string[]): Promise<KilnRun> {
  return kilnWith({}, ...args);
}
