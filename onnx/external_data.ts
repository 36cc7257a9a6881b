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
import { KilnError } from "../jit/errors.ts";
import {
  elementBytes,
  type GraphProto,
  int,
  isExternal,
  type ModelProto,
  type TensorProto,
} from "./proto.ts";

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

/** Where tensor `t`'s external bytes are, checked: no absolute or parent-relative location. */
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
  if (
    location.startsWith("/") || /^[a-z]:/i.test(location) ||
    location.split("/").includes("..")
  ) {
    throw fail(`its external data location "${location}" leaves the model's folder`);
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
  return { location, offset: number("offset", 0), length };
}

/**
 * Reads every external tensor of `model` through `read` and holds its bytes as raw data, in
 * place (the model was just decoded and belongs to the caller of `load`).
 */
export async function inlineExternalData(model: ModelProto, reader: ExternalReader): Promise<void> {
  try {
    for (const t of externalTensors(model)) {
      const ref = externalRef(t);
      t.rawData = ref.length ? await reader.read(ref) : new Uint8Array();
      t.externalData = undefined;
      t.dataLocation = 0;
    }
  } finally {
    await reader.close();
  }
}

/**
 * An {@linkcode ExternalReader} over a folder of the file system (Deno, Node, Bun): each data file
 * opened once (an exporter puts every tensor in one), read at each tensor's offset.
 */
export function fileReader(folder: string): ExternalReader {
  type Handle = import("node:fs/promises").FileHandle;
  const files = new Map<string, Promise<{ file: Handle; size: number }>>();
  const open = async (path: string) => {
    // Hidden from bundlers, as the model's own read: a browser build has no file system.
    const fs = ["node", "fs/promises"].join(":");
    const file = await (await import(fs) as typeof import("node:fs/promises")).open(path, "r");
    const info = await file.stat();
    if (info.isFile()) return { file, size: info.size };
    await file.close();
    throw new Error("not a regular file");
  };
  return {
    async read({ location, offset, length }) {
      const path = `${folder}/${location}`;
      try {
        let opened = files.get(path);
        if (!opened) files.set(path, opened = open(path));
        const { file, size } = await opened;
        if (offset + length > size) {
          throw new Error(`${length} bytes at offset ${offset} pass its end (${size} bytes)`);
        }
        const bytes = new Uint8Array(length);
        for (let at = 0; at < length;) {
          const { bytesRead } = await file.read(bytes, at, length - at, offset + at);
          if (bytesRead === 0) throw new Error("it ended early");
          at += bytesRead;
        }
        return bytes;
      } catch (e) {
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

/** An {@linkcode ExternalReader} of files fetched relative to `url`, each fetched once. */
export function urlReader(
  url: string | URL,
  fetched: (url: URL) => Promise<Uint8Array>,
): ExternalReader {
  const files = new Map<string, Promise<Uint8Array>>();
  return {
    async read({ location, offset, length }) {
      let at: URL;
      try {
        at = new URL(location, url);
      } catch (e) {
        throw new KilnError(
          `The model at ${url} names external data "${location}", which has no URL beside it`,
          {
            code: "bad-input",
            fix:
              "serve the model and its data file over http(s) side by side, or re-save the model with the data inline (onnx.save(onnx.load(path), path))",
            cause: e,
          },
        );
      }
      let file = files.get(at.href);
      if (!file) files.set(at.href, file = fetched(at));
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
