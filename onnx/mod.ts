/**
 * ONNX interchange: import models into kiln graphs, and run them.
 *
 * @module
 */
export { importOnnx, type OnnxImportOptions, OPSETS } from "./import.ts";
export type { OnnxInputInfo } from "./inputs.ts";
export { OnnxModel, type OnnxValue } from "./model.ts";
export type { ModelSummary, ValueSummary } from "./summary.ts";
export type { StringTensor } from "./string_ops.ts";
export { toOnnx } from "./export.ts";
