/**
 * ONNX interchange: import models into kiln graphs, and run them.
 *
 * @module
 */
export { importOnnx, type OnnxImportOptions } from "./import.ts";
export { OPSETS } from "./declarations.ts";
export type { OnnxInputInfo } from "./inputs.ts";
export { type OnnxLoadOptions, OnnxModel, type OnnxValue } from "./model.ts";
export { KILN_DOMAIN, type OnnxOpMapping, registerOnnxOp } from "./registered_ops.ts";
export type { ModelSummary, ValueSummary } from "./summary.ts";
export type { StringTensor } from "./string_ops.ts";
export { toOnnx } from "./export.ts";
