/**
 * What the importer checks of what a model declares before trusting it: the opset of its default
 * domain, named inputs, initializers and outputs, ops it can import, and that each graph output's
 * declared element type is what the graph computes.
 *
 * @module
 */
import { KilnError } from "../../jit/support/errors.ts";
import { type Known, typeOf } from "./node_context.ts";
import { dtypeOfCode, int, type ModelProto, type ValueInfoProto } from "../wire/proto.ts";
import { converterOf } from "../convert/mod.ts";

/** Opset versions of the default domain kiln accepts. */
export const OPSETS: readonly [number, number] = [1, 25];

/**
 * A graph output's declared element type must be what the graph computes (ONNX Runtime refuses
 * such a model too): a mismatch means a corrupt or hand-edited file, and trusting either side would
 * hand the caller data of a type it does not expect. A declared shape that differs is only
 * warned about, as ONNX Runtime does: exporters often leave a batch dimension static.
 */
export function checkDeclaredOutput(o: ValueInfoProto, k: Known): void {
  const tt = o.type?.tensorType;
  if (!tt) return;
  const got = typeOf(k);
  const dtype = k.i64 ? "i64" : got.dtype;
  if (tt.elemType) {
    const declared = dtypeOfCode(tt.elemType, `output "${o.name}"`);
    if (declared !== dtype) {
      throw new KilnError(`Output "${o.name}" is declared ${declared} but computes ${dtype}`, {
        code: "dtype-mismatch",
        fix: "the model's declared output type is wrong; re-export it (or fix its graph.output)",
      });
    }
  }
  const dims = tt.shape?.dim;
  if (!dims) return;
  const declared = dims.map((d) => (d.dimParam ? d.dimParam : int(d.dimValue)));
  const differs = declared.length !== got.shape.length ||
    declared.some((d, i) => typeof d === "number" && d > 0 && d !== got.shape[i]);
  if (differs) {
    console.warn(
      `kiln: output "${o.name}" is declared [${declared.join(", ")}] but computes [${
        got.shape.join(", ")
      }]`,
    );
  }
}

/** The default domain's opset version, checked against {@linkcode OPSETS}. */
export function checkOpset(model: ModelProto): number {
  const entry = model.opsetImport.find((o) => (o.domain ?? "") === "" || o.domain === "ai.onnx");
  // A model of other domains' ops only (the training optimizers) imports none of the default's.
  const others = model.opsetImport.length > 0 &&
    model.graph.node.every((n) => (n.domain ?? "") !== "" && n.domain !== "ai.onnx");
  if (!entry && others) return OPSETS[1];
  const version = int(entry?.version);
  if (version < OPSETS[0] || version > OPSETS[1]) {
    throw new KilnError(
      `The model uses opset ${version}; kiln imports opsets ${OPSETS[0]}–${OPSETS[1]}`,
      {
        code: "unsupported",
        fix: "convert it with onnx.version_converter.convert_version(model, 17)",
      },
    );
  }
  return version;
}

/** The opset version `model` imports for `domain` (1 where it lists none: a registered op's). */
export function domainVersion(model: ModelProto, domain: string | undefined): number {
  const d = domain === "ai.onnx" ? "" : domain ?? "";
  const entry = model.opsetImport.find((o) => (o.domain === "ai.onnx" ? "" : o.domain ?? "") === d);
  return entry ? int(entry.version) : 1;
}

/** Refuses a graph input, initializer or output without a name. */
export function checkNames({ graph: g }: ModelProto): void {
  const unnamed = [
    ...g.input.filter((i) => !i.name).map(() => "an input"),
    ...g.initializer.filter((t) => !t.name).map(() => "an initializer"),
    ...g.output.filter((o) => !o.name).map(() => "an output"),
  ];
  if (unnamed.length) {
    throw new KilnError(`The model's graph has ${unnamed[0]} with an empty name`, {
      code: "invalid-graph",
      fix: "name every graph input, initializer and output (re-export the model)",
    });
  }
}

/** Refuses, all at once, the ops of the main graph that kiln cannot import. */
export function checkOps(model: ModelProto): void {
  const unknown = new Set(
    model.graph.node.filter((n) => !converterOf(n.domain, n.opType, domainVersion(model, n.domain)))
      .map((n) => `${n.domain ? `${n.domain}::` : ""}${n.opType}`),
  );
  if (unknown.size) {
    throw new KilnError(
      `The model uses ops kiln cannot import: ${
        [...unknown].join(", ")
      } (no kiln backend — reference, wasm or webgpu — implements them)`,
      {
        code: "unknown-op",
        fix:
          "re-export without them, or register them: registerOp (the kiln op) and registerOnnxOp (its ONNX name)",
      },
    );
  }
}
