/**
 * Graph rewriting by decomposition: every node the predicate selects is replaced by the ops its
 * definition's `decompose` emits, recursively (an emitted op that is itself selected is expanded
 * too). Replacement values keep the original's type, checked, so the rewrite is invisible to
 * consumers and graph outputs.
 *
 * @module
 */
import { type NodeInfo, nodeInfo } from "../runtime/backend.ts";
import { type DType, fromNumbers } from "../ir/dtype.ts";
import { KilnError } from "../support/errors.ts";
import { boundaryOf, Graph, type NodeSpec, nodeSpecOf } from "../ir/graph.ts";
import {
  type Attrs,
  constantElements,
  type EmitRef,
  type Emitter,
  getOp,
  inferNode,
  type ValueType,
} from "../ops/mod.ts";
import { formatShape, sameShape } from "../ir/shape.ts";
import type { HostTensor } from "../ir/host_tensor.ts";

/** Which nodes to expand: given the node, whether to replace it by its decomposition. */
export type ExpandPredicate = (node: NodeInfo) => boolean;

/** Rewrites `graph`, expanding the decomposable nodes `expand` selects. Returns `graph` when none is. */
export function decompose(graph: Graph, expand: ExpandPredicate): Graph {
  const infos = graph.nodes.map((_, i) => nodeInfo(graph, i));
  const selected = (info: NodeInfo) => !getOp(info.op).primitive && expand(info);
  if (!infos.some(selected)) return graph;

  const nodes: NodeSpec[] = [];
  const refs: { name: string; type: ValueType }[] = [];
  const alias = new Map<number, string>();
  const nameOf = (v: number) => alias.get(v) ?? graph.values[v].name;
  const used = new Set(graph.values.map((v) => v.name));
  const fresh = (base: string) => {
    let i = 0;
    while (used.has(`${base}~${i}`)) i++;
    used.add(`${base}~${i}`);
    return `${base}~${i}`;
  };

  // Constants by value name: what a decomposition may read (`Emitter.constantOf`).
  const constants = new Map<string, HostTensor>();
  for (const n of graph.nodes) {
    if (n.op === "Constant") {
      constants.set(graph.values[n.outputs[0]].name, n.attrs.value as HostTensor);
    }
  }
  for (const n of graph.nodes) {
    const info = infos[n.id];
    if (!selected(info)) {
      nodes.push(nodeSpecOf(graph, n, nameOf));
      continue;
    }
    const base = graph.values[n.outputs[0]].name;
    const emitter = makeEmitter({
      refs,
      nodes,
      fresh: () => fresh(base),
      label: n.label,
      selected,
      constants,
    });
    const ins = n.inputs.map((v) => emitter.ref(nameOf(v), graph.values[v]));
    const outs = emitter.expand(n.op, ins, n.attrs);
    outs.forEach((r, k) => {
      const want = graph.values[n.outputs[k]];
      const got = refs[r.id].type;
      if (got.dtype !== want.dtype || !sameShape(got.shape, want.shape)) {
        throw new KilnError(
          `${n.label}: its decomposition yields ${got.dtype}${
            formatShape(got.shape)
          }, not ${want.dtype}${formatShape(want.shape)}`,
          {
            code: "internal",
            fix: "report this: a decomposition must preserve the op's output type",
          },
        );
      }
      alias.set(n.outputs[k], refs[r.id].name);
    });
  }
  return Graph.create({ ...boundaryOf(graph, nameOf), nodes });
}

interface EmitState {
  refs: { name: string; type: ValueType }[];
  nodes: NodeSpec[];
  fresh: () => string;
  label: string;
  selected: ExpandPredicate;
  constants: Map<string, HostTensor>;
}

function makeEmitter(s: EmitState): Emitter & {
  ref(name: string, type: ValueType): EmitRef;
  expand(op: string, inputs: readonly EmitRef[], attrs: Attrs): EmitRef[];
} {
  const ref = (name: string, type: ValueType): EmitRef => {
    s.refs.push({ name, type });
    return { id: s.refs.length - 1 };
  };
  const emit = (op: string, inputs: readonly EmitRef[], attrs: Attrs, count: number): EmitRef[] => {
    const types = inferNode(op, inputs.map((r) => s.refs[r.id].type), attrs, `${s.label} → ${op}`);
    const info: NodeInfo = {
      op,
      attrs,
      inputs: inputs.map((r) => s.refs[r.id].type),
      outputs: types,
      label: `${s.label} → ${op}`,
    };
    if (!getOp(op).primitive && s.selected(info)) return emitter.expand(op, inputs, attrs);
    if (types.length !== count) {
      throw new KilnError(
        `${s.label}: decomposition emitted ${op} expecting ${count} outputs, it has ${types.length}`,
        {
          code: "internal",
          fix: "report this: decompositions must request the right output count",
        },
      );
    }
    const outs = types.map((t) => ref(s.fresh(), t));
    if (op === "Constant") s.constants.set(s.refs[outs[0].id].name, attrs.value as HostTensor);
    s.nodes.push({
      op,
      inputs: inputs.map((r) => s.refs[r.id].name),
      outputs: outs.map((r) => s.refs[r.id].name),
      attrs,
    });
    return outs;
  };
  const emitter = {
    ref,
    expand: (op: string, inputs: readonly EmitRef[], attrs: Attrs) =>
      getOp(op).decompose!(emitter, inputs, attrs),
    op: (op: string, inputs: readonly EmitRef[], attrs: Attrs = {}) =>
      emit(op, inputs, attrs, 1)[0],
    opN: (op: string, inputs: readonly EmitRef[], attrs: Attrs | undefined, n: number) =>
      emit(op, inputs, attrs ?? {}, n),
    scalar: (value: number, dtype: DType) =>
      emit("Constant", [], { value: scalarTensor(value, dtype) }, 1)[0],
    typeOf: (r: EmitRef) => s.refs[r.id].type,
    constantOf: (r: EmitRef) => constantElements(s.constants.get(s.refs[r.id].name)),
  };
  return emitter;
}

function scalarTensor(value: number, dtype: DType) {
  return { data: fromNumbers(dtype, [value]), shape: [], dtype };
}
