/**
 * ONNX interchange: import models into kiln graphs, and run them.
 *
 * @module
 */
export { importOnnx, type OnnxImportOptions, type OnnxInputInfo, OPSETS } from "./import.ts";
export { OnnxModel, type OnnxValue } from "./model.ts";
export type { ModelSummary, ValueSummary } from "./summary.ts";
export { toOnnx } from "./export.ts";
