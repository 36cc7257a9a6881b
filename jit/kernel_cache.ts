/**
 * The kernel cache: generated code per kernel, keyed by the kernel IR's canonical text digest,
 * the backend id, its artifact format and its device profile. Entries are collision-checked
 * against the canonical text, held in a bounded LRU (entries and bytes), and written to a disk
 * tier (`KILN_CACHE_DIR`, default `$XDG_CACHE_HOME/kiln` or `~/.cache/kiln`) so a second process
 * loads artifacts instead of generating them. Disk trouble never fails a compile: the tier turns
 * itself off and says so in `stats().diskErrors`.
 *
 * @module
 */
import { envVar } from "./env.ts";
import type { Artifact, Backend } from "./backend.ts";
import { digest } from "./digest.ts";
import { type KernelIR, kernelText } from "./kernel_ir.ts";

/** Options of a {@linkcode KernelCache}. */
export interface KernelCacheOptions {
  /** Most entries in memory (default 1024). */
  readonly maxEntries?: number;
  /** Most artifact bytes in memory (default 64 MiB). */
  readonly maxBytes?: number;
  /** Disk directory, or `false` for memory only (default: `KILN_CACHE_DIR` or the user cache). */
  readonly dir?: string | false;
}

/** Counters of a {@linkcode KernelCache}. */
export interface KernelCacheStats {
  /** Served from memory. */
  hits: number;
  /** Generated (codegen ran). */
  misses: number;
  /** Served from disk (no codegen). */
  diskHits: number;
  /** Same digest, different kernel (generated anyway). */
  collisions: number;
  /** Entries dropped from memory. */
  evictions: number;
  /** Milliseconds spent generating. */
  compileMs: number;
  /** Entries in memory. */
  entries: number;
  /** Artifact bytes in memory. */
  bytes: number;
  /** Disk reads or writes that failed. */
  diskErrors: number;
}

interface Entry {
  readonly text: string;
  readonly artifact: Artifact;
  readonly bytes: number;
}

interface DiskRecord {
  format: string;
  text: string;
  artifact: string;
  binary: boolean;
}

type Fs = typeof import("node:fs/promises");

/** Where generated code for a kernel came from. */
export type CacheSource = "memory" | "disk" | "generated";

/** A bounded, collision-checked, optionally persistent cache of generated kernels. */
export class KernelCache {
  #entries = new Map<string, Entry>();
  #stats: KernelCacheStats = {
    hits: 0,
    misses: 0,
    diskHits: 0,
    collisions: 0,
    evictions: 0,
    compileMs: 0,
    entries: 0,
    bytes: 0,
    diskErrors: 0,
  };
  #maxEntries: number;
  #maxBytes: number;
  #dir: string | false;
  #fs?: Promise<Fs | undefined>;

  /** Creates a cache. */
  constructor(options: KernelCacheOptions = {}) {
    this.#maxEntries = options.maxEntries ?? 1024;
    this.#maxBytes = options.maxBytes ?? 64 << 20;
    this.#dir = options.dir === undefined ? defaultCacheDir() : options.dir;
  }

  /** The disk directory, or `false` when there is no disk tier. */
  get dir(): string | false {
    return this.#dir;
  }

  /**
   * A small text file kept beside the kernels (a calibration, a placement verdict): its contents,
   * or `undefined` when it is missing or there is no disk tier.
   */
  async readNote(name: string): Promise<string | undefined> {
    const fs = await this.#filesystem();
    if (!fs || this.#dir === false) return undefined;
    try {
      return await fs.readFile(`${this.#dir}/${name}`, "utf8");
    } catch {
      return undefined;
    }
  }

  /** Stores a note (see {@linkcode readNote}); a failure only costs recomputing it later. */
  async writeNote(name: string, text: string): Promise<void> {
    const fs = await this.#filesystem();
    if (!fs || this.#dir === false) return;
    try {
      await fs.mkdir(this.#dir, { recursive: true });
      await fs.writeFile(`${this.#dir}/${name}`, text);
    } catch { /* a read-only cache directory */ }
  }

  /** A copy of the counters. */
  stats(): KernelCacheStats {
    return { ...this.#stats, entries: this.#entries.size };
  }

  /** Drops every memory entry (the disk tier is kept). */
  clear(): void {
    this.#entries.clear();
    this.#stats.bytes = 0;
  }

  /** The artifact for `kernel` on `backend`: from memory, from disk, or freshly generated. */
  async artifact(
    kernel: KernelIR,
    backend: Backend,
  ): Promise<{ artifact: Artifact; source: CacheSource }> {
    const codegen = backend.codegen!;
    const text = kernelText(kernel);
    const key = `${backend.id}-${backend.version}-${codegen.format}-${
      digest(JSON.stringify(backend.capabilities())).slice(0, 8)
    }-${digest(text)}`;
    const hit = this.#entries.get(key);
    if (hit && hit.text === text) {
      this.#entries.delete(key);
      this.#entries.set(key, hit);
      this.#stats.hits++;
      return { artifact: hit.artifact, source: "memory" };
    }
    if (hit) this.#stats.collisions++;
    const disk = hit ? undefined : await this.#read(key, text, codegen.format);
    if (disk !== undefined) {
      this.#stats.diskHits++;
      this.#remember(key, text, disk);
      return { artifact: disk, source: "disk" };
    }
    const t0 = performance.now();
    const artifact = await codegen.generate(kernel);
    this.#stats.compileMs += performance.now() - t0;
    this.#stats.misses++;
    this.#remember(key, text, artifact);
    await this.#write(key, { format: codegen.format, text, ...encode(artifact) });
    return { artifact, source: "generated" };
  }

  #remember(key: string, text: string, artifact: Artifact): void {
    const bytes = typeof artifact === "string" ? artifact.length * 2 : artifact.byteLength;
    this.#entries.set(key, { text, artifact, bytes });
    this.#stats.bytes += bytes;
    while (
      this.#entries.size > this.#maxEntries ||
      (this.#stats.bytes > this.#maxBytes && this.#entries.size > 1)
    ) {
      const [oldest, e] = this.#entries.entries().next().value!;
      this.#entries.delete(oldest);
      this.#stats.bytes -= e.bytes;
      this.#stats.evictions++;
    }
  }

  #filesystem(): Promise<Fs | undefined> {
    if (this.#dir === false) return Promise.resolve(undefined);
    return this.#fs ??= import("node:fs/promises").then((fs) => fs as Fs, () => undefined);
  }

  async #read(key: string, text: string, format: string): Promise<Artifact | undefined> {
    const fs = await this.#filesystem();
    if (!fs || this.#dir === false) return undefined;
    try {
      const record = JSON.parse(
        await fs.readFile(`${this.#dir}/${key}.json`, "utf8"),
      ) as DiskRecord;
      if (record.format !== format || record.text !== text) return undefined;
      return record.binary ? fromBase64(record.artifact) : record.artifact;
    } catch (e) {
      if ((e as { code?: string }).code !== "ENOENT") this.#diskFailed();
      return undefined;
    }
  }

  async #write(key: string, record: DiskRecord): Promise<void> {
    const fs = await this.#filesystem();
    if (!fs || this.#dir === false) return;
    try {
      await fs.mkdir(this.#dir, { recursive: true });
      const tmp = `${this.#dir}/${key}.${Math.random().toString(36).slice(2)}.tmp`;
      await fs.writeFile(tmp, JSON.stringify(record));
      await fs.rename(tmp, `${this.#dir}/${key}.json`);
    } catch {
      this.#diskFailed();
    }
  }

  #diskFailed(): void {
    this.#stats.diskErrors++;
    if (this.#stats.diskErrors >= 3) this.#dir = false;
  }
}

/** Base64 codecs of engines that have them (Deno, recent V8); Node 20 has not. */
const base64 = Uint8Array as unknown as {
  fromBase64?: (text: string) => Uint8Array;
  prototype: { toBase64?: () => string };
};

function encode(artifact: Artifact): { artifact: string; binary: boolean } {
  if (typeof artifact === "string") return { artifact, binary: false };
  if (base64.prototype.toBase64) {
    return { artifact: (artifact as unknown as { toBase64(): string }).toBase64(), binary: true };
  }
  let s = "";
  for (const b of artifact) s += String.fromCharCode(b);
  return { artifact: btoa(s), binary: true };
}

/** Decodes a binary artifact: a conv kernel's module carries a table of ~300 KB, which a
 * per-character callback took 30 ms to decode. */
function fromBase64(text: string): Uint8Array {
  if (base64.fromBase64) return base64.fromBase64(text);
  const s = atob(text), out = new Uint8Array(s.length);
  for (let i = 0; i < s.length; i++) out[i] = s.charCodeAt(i);
  return out;
}

/** `KILN_CACHE_DIR`, else `$XDG_CACHE_HOME/kiln`, else `~/.cache/kiln`; `false` without an environment. */
export function defaultCacheDir(): string | false {
  const explicit = envVar("KILN_CACHE_DIR");
  if (explicit !== undefined) return explicit === "" || explicit === "off" ? false : explicit;
  const base = envVar("XDG_CACHE_HOME") ??
    (envVar("HOME") ? `${envVar("HOME")}/.cache` : undefined);
  return base ? `${base}/kiln` : false;
}

let shared: KernelCache | undefined;

/** The process-wide kernel cache. */
export function defaultKernelCache(): KernelCache {
  return shared ??= new KernelCache();
}
