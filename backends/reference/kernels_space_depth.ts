/**
 * Reference kernels of DepthToSpace and SpaceToDepth (`jit/ops/space_depth.ts`): every output
 * element read from the input element ONNX's index formulas name.
 *
 * @module
 */
import type { Kernel } from "./kernel.ts";
import { read, written } from "./tensor_io.ts";

/** Kernels of the block moves, by op name. */
export const spaceDepthKernels: Record<string, Kernel> = {
  DepthToSpace: ({ inputs: [x], outputs, ctx }) => {
    const v = read(x), [n, ch, h, w] = x.shape, b = ctx.int("blocksize");
    const crd = ctx.choice("mode", ["DCR", "CRD"]) === "CRD", c = ch / (b * b);
    const out = new Float64Array(v.length);
    let o = 0;
    for (let ni = 0; ni < n; ni++) {
      for (let ci = 0; ci < c; ci++) {
        for (let y = 0; y < h * b; y++) {
          for (let xi = 0; xi < w * b; xi++) {
            const [i, j] = [y % b, xi % b];
            const source = crd ? ci * b * b + i * b + j : (i * b + j) * c + ci;
            out[o++] = v[((ni * ch + source) * h + Math.floor(y / b)) * w + Math.floor(xi / b)];
          }
        }
      }
    }
    return [written(outputs[0].dtype, out)];
  },
  SpaceToDepth: ({ inputs: [x], outputs, ctx }) => {
    const v = read(x), [n, ch, h, w] = x.shape, b = ctx.int("blocksize");
    const out = new Float64Array(v.length);
    let o = 0;
    for (let ni = 0; ni < n; ni++) {
      for (let co = 0; co < ch * b * b; co++) {
        const [block, ci] = [Math.floor(co / ch), co % ch],
          [i, j] = [Math.floor(block / b), block % b];
        for (let y = 0; y < h / b; y++) {
          for (let xi = 0; xi < w / b; xi++) {
            out[o++] = v[((ni * ch + ci) * h + y * b + i) * w + xi * b + j];
          }
        }
      }
    }
    return [written(outputs[0].dtype, out)];
  },
};
