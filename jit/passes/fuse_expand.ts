/**
 * A composite's expansion inside fusion: its decomposition run against fusion's symbols, each
 * emitted op routed back through fusion (`Fuser.#apply`), so a composite fuses as the same ops
 * written out in the graph would. Its scalar constants are held as their type holds them: an
 * f16 scale rounded to 16 bits, as a graph's f16 constant is (ONNX's f16 Attention, once composed
 * by the importer, landed a float16 step off when it became a kiln op and its √scale was not).
 *
 * @module
 */
import { type DType, fromNumbers } from "../ir/dtype.ts";
import type { HostTensor } from "../ir/host_tensor.ts";
import {
  type Attrs,
  constantElements,
  type EmitRef,
  type Emitter,
  inferNode,
  type ValueType,
} from "../ops/mod.ts";
import { constSym, type Sym } from "./fuse_values.ts";

/** A decomposition: what an op's `decompose` is. */
export type Decomposition = (e: Emitter, inputs: readonly EmitRef[], attrs: Attrs) => EmitRef[];

/** What an expansion needs of fusion. */
export interface Expander {
  /** Runs one emitted op symbolically. */
  apply(op: string, ins: Sym[], attrs: Attrs, label: string, types: readonly ValueType[]): Sym[];
  /** The tensor of a constant's symbol. */
  tensorOf(s: Sym): HostTensor | undefined;
}

/** `decompose` of `ins` run through `x`. */
export function expandSymbols(
  x: Expander,
  ins: Sym[],
  { attrs, label }: { attrs: Attrs; label: string },
  decompose: Decomposition,
): Sym[] {
  const refs: Sym[] = [...ins];
  const ref = (s: Sym): EmitRef => ({ id: refs.push(s) - 1 });
  const emit = (o: string, xs: readonly EmitRef[], a: Attrs = {}) => {
    const syms = xs.map((r) => refs[r.id]);
    const types = inferNode(o, syms.map((s) => s.type), a, label);
    return x.apply(o, syms, a, label, types).map(ref);
  };
  const outs = decompose(
    {
      op: (o, xs, a) => emit(o, xs, a)[0],
      opN: (o, xs, a) => emit(o, xs, a),
      scalar: (value, dtype) => ref(constSym(held(value, dtype), { shape: [], dtype })),
      typeOf: (r) => refs[r.id].type,
      constantOf: (r) => constantElements(x.tensorOf(refs[r.id])),
    },
    ins.map((_, i) => ({ id: i })),
    attrs,
  );
  return outs.map((r) => refs[r.id]);
}

/** `value` as a tensor of `dtype` holds it (rounded to f16 or f32, wrapped to an integer type). */
function held(value: number, dtype: DType): number {
  return constantElements({ data: fromNumbers(dtype, [value]), shape: [], dtype })![0];
}
