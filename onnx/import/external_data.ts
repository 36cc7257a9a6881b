/**
 * ONNX external data: initializers (and tensor attributes) whose bytes live in files beside the
 * model, as PyTorch's exporter writes them (`model.onnx` + `model.onnx.data`) and as any model
 * over protobuf's 2 GiB must. A model loaded from a path or URL has each such tensor's bytes read
 * from `location` (relative to the model) at `offset`, `length` bytes, and held as its raw data,
 * so the importer sees an ordinary model. Locations that leave the model's folder, data past a
 * file's end and missing files are typed errors.
 *
 * @module
 */
import { checkBytes } from "../../jit/runtime/budget.ts";
import { KilnError } from "../../jit/support/errors.ts";
import {
  elementBytes,
  type GraphProto,
  int,
  isExternal,
  type ModelProto,
  type TensorProto,
} from "../wire/proto.ts";

/** Where one tensor's bytes are: a file relative to the model, a byte offset and a length. */
export interface ExternalRef {
  /** The file, relative to the model's folder (forward slashes). */
  readonly location: string;
  /** Byte offset into the file. */
  readonly offset: number;
  /** Bytes to read. */
  readonly length: number;
}

/**
 * Reads `length` bytes at `offset` of `location` (relative to the model), with typed errors;
 * `close` releases what the reads opened.
 */
export interface ExternalReader {
  /** The bytes of one tensor. */
  read(ref: ExternalRef): Promise<Uint8Array>;
  /** Releases open files (called once every tensor is read, or on the first failure). */
  close(): Promise<void>;
}

/** Every tensor of `graph` and its subgraphs (initializers, tensor attributes). */
function* tensorsOf(graph: GraphProto): Generator<TensorProto> {
  yield* graph.initializer ?? [];
  for (const node of graph.node ?? []) {
    for (const a of node.attribute ?? []) {
      if (a.t) yield a.t;
      const more = a as { tensors?: TensorProto[]; graphs?: GraphProto[] };
      yield* more.tensors ?? [];
      if (a.g) yield* tensorsOf(a.g);
      for (const g of more.graphs ?? []) yield* tensorsOf(g);
    }
  }
}

/** The tensors of `model` whose data is external. */
function externalTensors(model: ModelProto): TensorProto[] {
  return [...tensorsOf(model.graph)].filter(isExternal);
}

/** A URL scheme (`file:`, `http:`, `c:` too): a location names a path, never another resource. */
const SCHEME = /^[a-z][a-z0-9+.-]*:/i;

/**
 * Why `location` would leave the model's folder, or `undefined`: absolute, a drive, a scheme, a
 * parent segment or a NUL, as written or once percent-decoded (a URL's `%2e%2e` is `..`).
 */
function escapes(location: string): string | undefined {
  let decoded = location;
  try {
    decoded = decodeURIComponent(location);
  } catch {
    // Not percent-encoded text: the location is checked as written.
  }
  for (const form of new Set([location, decoded.replaceAll("\\", "/")])) {
    if (form.includes("\0")) return "holds a NUL character";
    if (form.startsWith("/")) return "is absolute";
    if (SCHEME.test(form)) return "names a scheme or a drive";
    if (form.split("/").includes("..")) return "climbs to a parent folder";
  }
  return undefined;
}

/** Where tensor `t`'s external bytes are, checked: no absolute, parent-relative or URL location. */
export function externalRef(t: TensorProto): ExternalRef {
  const where = `initializer "${t.name ?? ""}"`;
  const entries = new Map(
    (t.externalData ?? []).map((e) => {
      const { key, value } = e as { key?: string; value?: string };
      return [key ?? "", value ?? ""];
    }),
  );
  const fail = (why: string) =>
    new KilnError(`${where}: ${why}`, {
      code: "bad-input",
      fix:
        "re-export the model, or re-save it with the data inline (onnx.save(onnx.load(path), path))",
    });
  const location = (entries.get("location") ?? "").replaceAll("\\", "/");
  if (!location) throw fail("its external data names no location");
  // As ONNX's checker: the data stays in the model's folder or below it.
  const escape = escapes(location);
  if (escape) {
    throw fail(`its external data location "${location}" leaves the model's folder (it ${escape})`);
  }
  const number = (key: string, fallback: number) => {
    const text = entries.get(key);
    if (text === undefined) return fallback;
    const n = Number(text);
    if (!/^\d+$/.test(text.trim()) || !Number.isSafeInteger(n)) {
      throw fail(`its external data ${key} "${text}" is not a byte count`);
    }
    return n;
  };
  const count = (t.dims ?? []).reduce((a: number, d) => a * int(d), 1);
  const expected = count * elementBytes(t.dataType ?? 0, where);
  const length = number("length", expected);
  if (length !== expected) {
    throw fail(
      `its external data is ${length} bytes long, where ${count} elements take ${expected}`,
    );
  }
  // Before any byte is read: a model may declare terabytes in a few bytes of protobuf.
  checkBytes(length, `${where} (external data)`);
  return { location, offset: number("offset", 0), length };
}

/**
 * Reads every external tensor of `model` through `read` and holds its bytes as raw data, in
 * place (the model was just decoded and belongs to the caller of `load`).
 */
export async function inlineExternalData(model: ModelProto, reader: ExternalReader): Promise<void> {
  try {
    // Every location and size is checked before the first read.
    const refs = externalTensors(model).map((t) => [t, externalRef(t)] as const);
    for (const [t, ref] of refs) {
      t.rawData = ref.length ? await reader.read(ref) : new Uint8Array();
      t.externalData = undefined;
      t.dataLocation = 0;
    }
  } finally {
    await reader.close();
  }
}

type NodeFs = typeof import("node:fs/promises");
type Handle = import("node:fs/promises").FileHandle;

/** `node:fs/promises`, hidden from bundlers as the model's own read: a browser has no files. */
async function nodeFs(): Promise<NodeFs> {
  return await import(["node", "fs/promises"].join(":")) as NodeFs;
}

/** Whether real path `path` is `folder` itself or lies below it. */
function inside(path: string, folder: string): boolean {
  const root = folder.replace(/[\\/]+$/, "");
  return path.startsWith(root) && (path[root.length] === "/" || path[root.length] === "\\");
}

/** What a file read beside a model is, for the refusal of one that leads outside its folder. */
export interface BesideFile {
  /** What the file is to the model, e.g. `external data`. */
  readonly what: string;
  /** The refusal's Fix. */
  readonly fix: string;
}

/** The model's external data. */
const DATA_FILE: BesideFile = {
  what: "external data",
  fix:
    "keep the data file itself (not a link to elsewhere) in the model's folder, or re-save the model with the data inline (onnx.save(onnx.load(path), path))",
};

/** The typed refusal of a file that leads to `real`, outside the model's folder. */
function leadsOutside(location: string, real: string, role: BesideFile): KilnError {
  return new KilnError(
    `The model's ${role.what} "${location}" leads outside the model's folder (to ${real})`,
    { code: "bad-input", fix: role.fix },
  );
}

/**
 * Opens `location` below `folder` for reading, where it stays there once every link is followed:
 * a link beside the model (`m.onnx.data -> /etc/passwd`) or on the way (`sub -> /etc`) that
 * leads out is refused. The resolved path is opened without following a last link and without
 * blocking (a FIFO would wait for a writer forever); where the system names what a descriptor
 * opened (Linux's /proc/self/fd), that is checked again, so a folder on the way swapped for a
 * link between the check and the open is refused too. It must be a regular file.
 */
async function openInside(fs: NodeFs, folder: string, location: string, role = DATA_FILE) {
  const realFolder = await fs.realpath(folder);
  const real = await fs.realpath(`${folder}/${location}`);
  if (!inside(real, realFolder)) throw leadsOutside(location, real, role);
  const { constants } = await import(["node", "fs"].join(":")) as typeof import("node:fs");
  const flags = constants.O_RDONLY | (constants.O_NOFOLLOW ?? 0) | (constants.O_NONBLOCK ?? 0);
  const file = await fs.open(real, flags);
  try {
    const opened = await fs.readlink(`/proc/self/fd/${file.fd}`).catch(() => real);
    if (!inside(opened, realFolder)) throw leadsOutside(location, opened, role);
    const info = await file.stat();
    if (!info.isFile()) throw new Error("not a regular file");
    return { file, size: info.size };
  } catch (e) {
    await file.close();
    throw e;
  }
}

/** `length` bytes of `file` from `offset`, however many reads it takes. */
async function readAt(file: Handle, offset: number, length: number): Promise<Uint8Array> {
  const bytes = new Uint8Array(length);
  for (let at = 0; at < length;) {
    const { bytesRead } = await file.read(bytes, at, length - at, offset + at);
    if (bytesRead === 0) throw new Error("it ended early");
    at += bytesRead;
  }
  return bytes;
}

/**
 * The bytes of file `name` in a model's `folder`, opened as its external data is (links leading
 * outside the folder refused, a regular file only): for the files a model comes with, its
 * tokenizer's. A missing file throws the file system's error (its `code` ENOENT).
 */
export async function readBeside(
  folder: string,
  name: string,
  role: BesideFile,
): Promise<Uint8Array> {
  const { file, size } = await openInside(await nodeFs(), folder, name, role);
  try {
    return await readAt(file, 0, size);
  } finally {
    await file.close();
  }
}

/**
 * An {@linkcode ExternalReader} over a folder of the file system (Deno, Node, Bun): each data file
 * opened once (an exporter puts every tensor in one), read at each tensor's offset; nothing
 * outside the folder is opened, however links are laid.
 */
export function fileReader(folder: string): ExternalReader {
  const files = new Map<string, Promise<{ file: Handle; size: number }>>();
  return {
    async read({ location, offset, length }) {
      const path = `${folder}/${location}`;
      try {
        let opened = files.get(path);
        if (!opened) {
          files.set(
            path,
            opened = nodeFs().then((fs) => openInside(fs, folder, location)),
          );
        }
        const { file, size } = await opened;
        if (offset + length > size) {
          throw new Error(`${length} bytes at offset ${offset} pass its end (${size} bytes)`);
        }
        return await readAt(file, offset, length);
      } catch (e) {
        if (e instanceof KilnError) throw e;
        throw new KilnError(
          `Cannot read the model's external data ${path}: ${(e as Error).message}`,
          {
            code: "bad-input",
            fix:
              "keep the data file the model names beside it (as the exporter wrote them), or re-save the model with the data inline (onnx.save(onnx.load(path), path))",
            cause: e,
          },
        );
      }
    },
    async close() {
      const opened = await Promise.allSettled(files.values());
      await Promise.all(
        opened.flatMap((o) => (o.status === "fulfilled" ? [o.value.file.close()] : [])),
      );
    },
  };
}

/**
 * The URL of `location` beside the model at `base`: each path segment percent-encoded (a location
 * is a file path, so `%2e%2e` names a folder called that, never the parent), and checked to keep
 * the model's origin and stay below its folder; anything else is a typed error.
 */
export function urlBeside(base: URL, location: string): URL {
  let at: URL;
  try {
    at = new URL(location.split("/").map(encodeURIComponent).join("/"), base);
  } catch (e) {
    throw refusal(base, location, "which has no URL beside it", e);
  }
  checkBeside(base, at, location);
  return at;
}

/** A typed refusal of external data `location` named by the model at `base`. */
function refusal(base: URL, location: string, why: string, cause?: unknown): KilnError {
  return new KilnError(`The model at ${base.href} names external data "${location}", ${why}`, {
    code: "bad-input",
    fix:
      "serve the model and its data file over http(s) side by side, or re-save the model with the data inline (onnx.save(onnx.load(path), path))",
    cause,
  });
}

/** Refuses `at` (where `location` leads, or a redirect from it) unless it is below `base`'s folder. */
function checkBeside(base: URL, at: URL, location: string): void {
  const folder = base.pathname.slice(0, base.pathname.lastIndexOf("/") + 1);
  if (!/^https?:$/.test(base.protocol) || at.origin !== base.origin) {
    throw refusal(
      base,
      location,
      `which has no URL beside it (only http(s) models read data from their origin; it leads to ${at.origin})`,
    );
  }
  if (!at.pathname.startsWith(folder)) {
    throw refusal(base, location, "which leaves the model's folder");
  }
}

/**
 * Fetches the bytes at a URL; `redirected` is shown every redirect before it is followed and
 * throws to refuse it (so a data file cannot send the reader to another origin).
 */
export type UrlFetch = (url: URL, redirected: (to: URL) => void) => Promise<Uint8Array>;

/** An {@linkcode ExternalReader} of files fetched relative to `url`, each fetched once. */
export function urlReader(url: string | URL, fetched: UrlFetch): ExternalReader {
  const files = new Map<string, Promise<Uint8Array>>();
  const base = new URL(url);
  return {
    async read({ location, offset, length }) {
      const at = urlBeside(base, location);
      let file = files.get(at.href);
      if (!file) files.set(at.href, file = fetched(at, (to) => checkBeside(base, to, location)));
      const bytes = await file;
      if (offset + length > bytes.byteLength) {
        throw new KilnError(
          `The model's external data ${at.href}: ${length} bytes at offset ${offset} pass its end (${bytes.byteLength} bytes)`,
          {
            code: "bad-input",
            fix: "re-export the model, or serve the data file it was saved with",
          },
        );
      }
      return bytes.subarray(offset, offset + length);
    },
    close: () => Promise.resolve(),
  };
}
