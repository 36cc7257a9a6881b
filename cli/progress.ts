/**
 * The CLI's progress line: a compile's phases on stderr once the work has taken about a second
 * (a quick run prints nothing), rewritten in place on a terminal and one line per phase
 * otherwise (a log, CI). `--quiet` turns it off.
 *
 * @module
 */
import process from "node:process";
import { defaultBackends } from "../backends/registry.ts";
import { envVar } from "../jit/support/env.ts";
import type { Progress, ProgressCallback } from "../jit/runtime/progress.ts";

/** What a compile's progress shows, and how it is closed. */
export interface ProgressDisplay {
  /** The callback to pass as `onProgress` (undefined when quiet). */
  readonly report: ProgressCallback | undefined;
  /** Ends the display (clears a terminal's line); call once the compile settles. */
  finish(): void;
}

/** Milliseconds of work before anything is shown (`KILN_PROGRESS_MS`, default 1000). */
function quietMs(): number {
  const ms = Number(envVar("KILN_PROGRESS_MS") ?? 1000);
  return Number.isFinite(ms) && ms >= 0 ? ms : 1000;
}

/**
 * A progress display on stderr, or none when `quiet`. `eager` shows each phase as it starts:
 * a software GPU compiles its pipelines on the thread that runs JavaScript (at creation or at
 * the first dispatch), so no timer fires until it is done (vit_tiny on llvmpipe: 5.4 s).
 */
export function progressDisplay(
  quiet: boolean,
  options: { readonly eager?: boolean } = {},
): ProgressDisplay {
  if (quiet) return { report: undefined, finish() {} };
  const tty = process.stderr.isTTY === true;
  const began = performance.now();
  const after = quietMs();
  let last: Progress | undefined;
  let shownPhase = "";
  let wrote = false;
  const line = (p: Progress) =>
    `kiln: ${p.phase} ${p.total > 1 ? `${p.done}/${p.total}` : p.done ? "done" : "…"}`;
  // On a log, one line per phase (and per run: each may be the slow one).
  const key = (p: Progress) => p.phase === "run" ? `run ${p.done}` : p.phase;
  const show = () => {
    if (!last) return;
    if (tty) process.stderr.write(`\r\x1b[K${line(last)}`);
    else if (key(last) !== shownPhase) process.stderr.write(`${line(last)}\n`);
    shownPhase = key(last);
    wrote = true;
  };
  // A phase may run long without reporting (a GPU's pipelines): show it once the second is up.
  const timer = setTimeout(show, after);
  unref(timer);
  return {
    report(p) {
      last = p;
      if (options.eager || performance.now() - began >= after) show();
    },
    finish() {
      clearTimeout(timer);
      if (wrote && tty) process.stderr.write("\r\x1b[K");
    },
  };
}

/** Lets the process exit with `timer` pending (Deno and Node keep timers differently). */
function unref(timer: ReturnType<typeof setTimeout>): void {
  const deno = (globalThis as { Deno?: { unrefTimer?(id: number): void } }).Deno;
  if (typeof timer === "number") deno?.unrefTimer?.(timer);
  else (timer as { unref?(): void }).unref?.();
}

/** Whether `backend` names a WebGPU backend on a software adapter (prepared to find out). */
export async function softwareGpu(backend: string | undefined): Promise<boolean> {
  if (!backend || backend === "auto") return false; // auto leaves a software GPU out
  try {
    const b = defaultBackends().get(backend);
    if (b.kind !== "gpu") return false;
    await b.prepare();
    return b.capabilities().software === true;
  } catch {
    return false; // the compile reports what is wrong with the backend
  }
}
