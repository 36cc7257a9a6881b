/**
 * The few file-system calls kiln makes (the kernel cache's disk tier, reading a model), through
 * Deno's own API where there is one and `node:fs/promises` elsewhere (Node, Bun). Deno loads its
 * Node compatibility layer on the first `node:` import: 35-38 ms of a first run on the 2-core VM
 * (2026-11-26), paid by every process that touched the kernel cache or loaded a model by path.
 *
 * @module
 */

/** What `stat` tells of a path. */
export interface HostStat {
  /** Whether it is a regular file (not a directory, FIFO, device or, for `lstat`, a link). */
  readonly isFile: boolean;
  /** Its size in bytes. */
  readonly size: number;
}

/** The file-system calls kiln makes; errors carry Node's `code` (`ENOENT`, …) on both hosts. */
export interface HostFs {
  /** The path's own entry (a link is not followed). */
  lstat(path: string): Promise<HostStat>;
  /** The entry the path (or `file:` URL) leads to (links followed). */
  stat(path: string | URL): Promise<HostStat>;
  /**
   * The file's bytes; `room` bytes of their buffer left free after them where the host reads
   * into a buffer of its own (Deno; elsewhere none), for a move in place (`decodeAligned`).
   */
  readFile(path: string | URL, room?: number): Promise<Uint8Array>;
  /** The file as UTF-8 text. */
  readTextFile(path: string): Promise<string>;
  /** Writes `text` to the file, replacing it. */
  writeTextFile(path: string, text: string): Promise<void>;
  /** Makes the directory and its parents. */
  mkdirAll(path: string): Promise<void>;
  /** Moves `from` to `to`, replacing `to`. */
  rename(from: string, to: string): Promise<void>;
  /** Removes the path and anything under it; a missing path is no error. */
  removeAll(path: string): Promise<void>;
}

interface DenoFile {
  stat(): Promise<HostStat>;
  read(into: Uint8Array): Promise<number | null>;
  close(): void;
}

interface DenoFs {
  lstat(path: string): Promise<HostStat>;
  stat(path: string | URL): Promise<HostStat>;
  open(path: string | URL): Promise<DenoFile>;
  readFile(path: string | URL): Promise<Uint8Array>;
  readTextFile(path: string): Promise<string>;
  writeTextFile(path: string, text: string): Promise<void>;
  mkdir(path: string, options: { recursive: boolean }): Promise<void>;
  rename(from: string, to: string): Promise<void>;
  remove(path: string, options: { recursive: boolean }): Promise<void>;
}

let host: Promise<HostFs | undefined> | undefined;

/** The host's file system, or `undefined` where there is none (a browser). */
export function hostFs(): Promise<HostFs | undefined> {
  return host ??= load();
}

async function load(): Promise<HostFs | undefined> {
  const deno = (globalThis as { Deno?: DenoFs }).Deno;
  if (deno && typeof deno.lstat === "function") {
    return {
      lstat: (p) => deno.lstat(p),
      stat: (p) => deno.stat(p),
      readFile: (p, room = 0) => readSized(deno, p, room),
      readTextFile: (p) => deno.readTextFile(p),
      writeTextFile: (p, text) => deno.writeTextFile(p, text),
      mkdirAll: (p) => deno.mkdir(p, { recursive: true }),
      rename: (a, b) => deno.rename(a, b),
      removeAll: async (p) => {
        try {
          await deno.remove(p, { recursive: true });
        } catch (e) {
          if ((e as { code?: string }).code !== "ENOENT") throw e;
        }
      },
    };
  }
  try {
    // Hidden from bundlers: a browser build has no file system and never takes this path.
    const fs = await import(["node", "fs/promises"].join(":")) as typeof import("node:fs/promises");
    const info = (s: { isFile(): boolean; size: number }) => ({ isFile: s.isFile(), size: s.size });
    return {
      lstat: async (p) => info(await fs.lstat(p)),
      stat: async (p) => info(await fs.stat(p)),
      readFile: async (p) => new Uint8Array(await fs.readFile(p)),
      readTextFile: (p) => fs.readFile(p, "utf8"),
      writeTextFile: (p, text) => fs.writeFile(p, text),
      mkdirAll: async (p) => void await fs.mkdir(p, { recursive: true }),
      rename: (a, b) => fs.rename(a, b),
      removeAll: (p) => fs.rm(p, { force: true, recursive: true }),
    };
  } catch {
    return undefined;
  }
}

/** Bytes a read asks for at a time (larger reads were no faster on the 2-core VM). */
const CHUNK = 64 << 20;

/**
 * A regular file's bytes read into one buffer of its size. Deno's `readFile` took 7.0-7.7 s for
 * an 862 MB model on the 2-core VM where this takes 2.9-3.0 s, the file in the page cache both
 * ways (it grows its buffer as it reads, and that VM touches a new page at about 360 MB/s). Other
 * files (devices, pipes, one that grew while read) go through `readFile` as they did.
 */
async function readSized(deno: DenoFs, path: string | URL, room: number): Promise<Uint8Array> {
  const file = await deno.open(path);
  try {
    const { isFile, size } = await file.stat();
    if (!isFile) return await deno.readFile(path);
    const bytes = new Uint8Array(size + room).subarray(0, size);
    let at = 0;
    while (at < size) {
      const n = await file.read(bytes.subarray(at, Math.min(size, at + CHUNK)));
      if (n === null) return bytes.subarray(0, at);
      at += n;
    }
    return (await file.read(new Uint8Array(1))) === null ? bytes : await deno.readFile(path);
  } finally {
    file.close();
  }
}
