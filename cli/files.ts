/**
 * The CLI's file handling, checked before any compute: inputs are read only from regular files of
 * exactly the size their shape needs (never `/dev/zero` without end), output locations are proven
 * writable before the model runs, and distinct output names always get distinct files. Every
 * failure is a {@linkcode KilnError} with a `Fix:`, never a raw file-system error's stack. Written
 * with `node:fs`, so the CLI runs the same under Deno and Node.
 *
 * @module
 */
import { mkdir, open, readFile, rm, stat, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { KilnError } from "../jit/support/errors.ts";
import type { TensorMap } from "../jit/runtime/executable.ts";

/** What a file-system error means to a CLI user. */
function fsError(what: string, path: string, e: unknown, fix: string): KilnError {
  const code = (e as { code?: string })?.code;
  const reason = code === "ENOENT"
    ? "does not exist"
    : code === "EACCES" || code === "EPERM"
    ? "is not accessible (permission denied)"
    : code === "EISDIR"
    ? "is a directory"
    : `cannot be used (${(e as Error)?.message ?? e})`;
  return new KilnError(`${what} ${path} ${reason}`, { code: "bad-input", fix, cause: e });
}

/**
 * Reads input file `path`: a regular file of at most `maxBytes` (and exactly `bytes`, when the
 * shape is known) — checked before reading, so a device or a huge file is refused, not read.
 */
export async function readInputFile(
  path: string,
  limits: { bytes?: number; maxBytes: number },
): Promise<Uint8Array> {
  const fix = "pass --input NAME=FILE with a raw little-endian file of the input's dtype and shape";
  let info: Awaited<ReturnType<typeof stat>>;
  try {
    info = await stat(path);
  } catch (e) {
    throw fsError("--input", path, e, fix);
  }
  if (!info.isFile()) {
    const what = info.isDirectory()
      ? "a directory"
      : "not a regular file (a device, FIFO or socket)";
    throw new KilnError(`--input ${path} is ${what}`, { code: "bad-input", fix });
  }
  const size = Number(info.size);
  if (limits.bytes !== undefined && size !== limits.bytes) {
    throw new KilnError(`--input ${path} has ${size} bytes; the input needs ${limits.bytes}`, {
      code: "bad-input",
      fix,
    });
  }
  if (size > limits.maxBytes) {
    throw new KilnError(
      `--input ${path} has ${size} bytes, over the budget of ${limits.maxBytes} per tensor`,
      { code: "limit", fix: "pass a smaller input, or raise KILN_MAX_TENSOR_BYTES" },
    );
  }
  try {
    return new Uint8Array(await readFile(path));
  } catch (e) {
    throw fsError("--input", path, e, fix);
  }
}

/** Proves `dir` can receive files (creating it) before the model runs. */
export async function checkWritableDir(dir: string, flag: string): Promise<void> {
  const probe = `${dir}/.kiln-write-test-${crypto.randomUUID()}`;
  try {
    await mkdir(dir, { recursive: true });
    await writeFile(probe, new Uint8Array());
    await rm(probe);
  } catch (e) {
    throw fsError(flag, dir, e, `pass a ${flag} directory you can write to`);
  }
}

/** Proves file `path` can be written before the model runs (an existing file is left as is). */
export async function checkWritableFile(path: string, flag: string): Promise<void> {
  try {
    // "a": create if missing, never truncate what is there.
    await (await open(path, "a")).close();
  } catch (e) {
    throw fsError(flag, path, e, `pass a ${flag} path in a directory you can write to`);
  }
}

/** Writes `text` to `path` as a typed failure. */
export async function writeTextFile(path: string, text: string, flag: string): Promise<void> {
  try {
    await writeFile(path, text);
  } catch (e) {
    throw fsError(flag, path, e, `pass a ${flag} path you can write to`);
  }
}

/**
 * File names for output names: unsafe characters become `_`, and names that would then collide
 * (`a/b` and `a_b`, or `Y` and `y` on a case-insensitive disk) get `-2`, `-3`, … in output order.
 */
export function outputFileNames(names: readonly string[]): Map<string, string> {
  const used = new Set<string>(["outputs.json"]);
  const out = new Map<string, string>();
  for (const name of names) {
    const base = name.replace(/[^A-Za-z0-9._-]/g, "_").replace(/^\.+/, "_") || "_";
    let file = `${base}.bin`;
    for (let i = 2; used.has(file.toLowerCase()); i++) file = `${base}-${i}.bin`;
    used.add(file.toLowerCase());
    out.set(name, file);
  }
  return out;
}

/** Writes each output to `dir/<file>.bin` and an `outputs.json` index; returns the files. */
export async function saveOutputs(dir: string, outputs: TensorMap): Promise<Map<string, string>> {
  const files = outputFileNames(Object.keys(outputs));
  const index: Record<string, { shape: readonly number[]; dtype: string; file: string }> = {};
  try {
    await mkdir(dir, { recursive: true });
    for (const [name, t] of Object.entries(outputs)) {
      const file = files.get(name)!;
      await writeFile(
        join(dir, file),
        new Uint8Array(t.data.buffer, t.data.byteOffset, t.data.byteLength),
      );
      index[name] = { shape: t.shape, dtype: t.dtype, file };
    }
    await writeFile(join(dir, "outputs.json"), JSON.stringify(index, null, 2) + "\n");
  } catch (e) {
    throw fsError("--save", dir, e, "pass a --save directory you can write to");
  }
  // Joined as paths: `--save out/` gave "out//y.bin".
  return new Map([...files].map(([name, file]) => [name, join(dir, file)]));
}
