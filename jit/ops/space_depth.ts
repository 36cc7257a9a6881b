/**
 * DepthToSpace and SpaceToDepth as kiln ops, over [N, C, H, W]: DepthToSpace moves blocks of
 * `blocksize`² channels into blocksize × blocksize pixels (`mode` DCR: depth, column, row, the
 * default; CRD: column, row, depth), SpaceToDepth does the reverse of DCR. Both decompose into a
 * reshape, a transpose and a reshape.
 *
 * @module
 */
import {
  type Attrs,
  defineOps,
  type EmitRef,
  type Emitter,
  type InferContext,
  type OpDef,
  type ValueType,
} from "./registry.ts";

/** The modes of DepthToSpace; the first is ONNX's default. */
export const DEPTH_MODES = ["DCR", "CRD"] as const;

/** The output type of either op, its input and blocksize checked. */
function blockType(ctx: InferContext, toSpace: boolean): ValueType {
  const { shape, dtype } = ctx.input(0), b = ctx.int("blocksize");
  if (toSpace) ctx.choice("mode", DEPTH_MODES);
  const [n, c, h, w] = shape;
  const fits = shape.length === 4 && Number.isInteger(b) && b >= 1 &&
    (toSpace ? c % (b * b) === 0 : h % b === 0 && w % b === 0);
  if (!fits) {
    ctx.fail(
      `[${shape}] in blocks of ${b}`,
      toSpace
        ? "give [N, C, H, W] with C a multiple of blocksize²"
        : "give [N, C, H, W] with H and W multiples of blocksize",
      "shape-mismatch",
    );
  }
  const out = toSpace ? [n, c / (b * b), h * b, w * b] : [n, c * b * b, h / b, w / b];
  return { shape: out, dtype };
}

/** DepthToSpace's decomposition. */
function depthToSpace(e: Emitter, x: EmitRef, a: Attrs): EmitRef {
  const [n, ch, h, w] = e.typeOf(x).shape, b = a.blocksize as number, crd = a.mode === "CRD";
  const inner = crd ? [n, ch / (b * b), b, b, h, w] : [n, b, b, ch / (b * b), h, w];
  const perm = crd ? [0, 1, 4, 2, 5, 3] : [0, 3, 4, 1, 5, 2];
  const moved = e.op("Transpose", [e.op("Reshape", [x], { shape: inner })], { perm });
  return e.op("Reshape", [moved], { shape: [n, ch / (b * b), h * b, w * b] });
}

/** SpaceToDepth's decomposition. */
function spaceToDepth(e: Emitter, x: EmitRef, a: Attrs): EmitRef {
  const [n, ch, h, w] = e.typeOf(x).shape, b = a.blocksize as number;
  const split = e.op("Reshape", [x], { shape: [n, ch, h / b, b, w / b, b] });
  const moved = e.op("Transpose", [split], { perm: [0, 3, 5, 1, 2, 4] });
  return e.op("Reshape", [moved], { shape: [n, ch * b * b, h / b, w / b] });
}

const spaceDepthOps: OpDef[] = [{
  name: "DepthToSpace",
  category: "composite",
  arity: [1, 1],
  primitive: false,
  infer: (ctx) => [blockType(ctx, true)],
  decompose: (e, [x], a) => [depthToSpace(e, x, a)],
}, {
  name: "SpaceToDepth",
  category: "composite",
  arity: [1, 1],
  primitive: false,
  infer: (ctx) => [blockType(ctx, false)],
  decompose: (e, [x], a) => [spaceToDepth(e, x, a)],
}];

defineOps(spaceDepthOps);
