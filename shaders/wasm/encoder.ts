/**
 * kiln's WebAssembly module builder: expressions built as trees (`m.i32.add(a, b)`, blocks and
 * loops with named labels, as Binaryen.js's API builds them), written straight to the binary
 * format by {@linkcode WasmModule.emitBinary}. It replaced Binaryen.js, which kiln used only to
 * build and write modules (no passes): loading its 8 MB glue and compiling its own wasm took
 * 220–300 ms of every process's first compile on the 2-core machine, 40% of a model's first run.
 *
 * An expression is a number (its index in the module's nodes); each is used once, as in Binaryen.
 * Types follow the instructions: a block's is its last child's unless given, an `if`'s its arms'.
 * {@linkcode WasmModule.validate} checks the whole binary with the engine's own validator.
 *
 * @module
 */
import { KilnError } from "../../jit/support/errors.ts";
import {
  CONST,
  CONVERSIONS,
  type ExpressionRef,
  F32,
  F32X4,
  F64,
  F64X2,
  type FloatInstructions,
  type FloatOps,
  type Fns,
  I16X8,
  I32_BINARY,
  I32_UNARY,
  type I32Ops,
  I32X4,
  I64X2,
  I8X16,
  type LaneOps,
  type Lanes,
  LOAD32_SPLAT,
  MEMORY,
  type MemoryOps,
  type OpCode,
  type Type,
  TYPES,
  V128,
  type V128Ops,
} from "./opcodes.ts";

export type { ExpressionRef, Type } from "./opcodes.ts";

type Ref = ExpressionRef;
type Fn1 = (a: Ref) => Ref;
type Fn2 = (a: Ref, b: Ref) => Ref;
type Fn3 = (a: Ref, b: Ref, c: Ref) => Ref;
/** An expression node: its type, and what to write (after its operands, for `op`). */
type Node =
  | {
    readonly kind: "op";
    readonly type: Type;
    readonly kids: readonly Ref[];
    readonly code: readonly number[];
  }
  | {
    readonly kind: "block";
    readonly type: Type;
    readonly label: string | null;
    readonly kids: readonly Ref[];
  }
  | {
    readonly kind: "loop";
    readonly type: Type;
    readonly label: string | null;
    readonly body: Ref;
  }
  | { readonly kind: "if"; readonly type: Type; readonly kids: readonly Ref[] }
  | {
    readonly kind: "br";
    readonly type: Type;
    readonly label: string;
    readonly kids: readonly Ref[];
    readonly conditional: boolean;
  }
  | {
    readonly kind: "call";
    readonly type: Type;
    readonly name: string;
    readonly kids: readonly Ref[];
  };

/** A function of the module. */
interface FunctionDef {
  readonly name: string;
  readonly params: Type;
  readonly results: Type;
  readonly vars: readonly Type[];
  readonly body: Ref;
}

/** A function or memory import. */
interface Import {
  readonly name: string;
  readonly module: string;
  readonly base: string;
  readonly params?: Type;
  readonly results?: Type;
}

// Parameter lists (`createType`) get ids past every value type's byte.
const tuples: Type[][] = [];
const tupleIds = new Map<string, Type>();
const TUPLE_BASE = 0x1000;

/** The type of a parameter list (one type stands for itself, none for `none`). */
export function createType(types: readonly Type[]): Type {
  if (types.length === 0) return TYPES.none;
  if (types.length === 1) return types[0];
  const key = types.join(",");
  let id = tupleIds.get(key);
  if (id === undefined) {
    id = TUPLE_BASE + tuples.push([...types]) - 1;
    tupleIds.set(key, id);
  }
  return id;
}

const typesOf = (t: Type): readonly Type[] =>
  t >= TUPLE_BASE ? tuples[t - TUPLE_BASE] : t === TYPES.none ? [] : [t];

/** A module being built: its instructions by namespace, its functions, globals and exports. */
export class WasmModule {
  #nodes: Node[] = [];
  #functions: FunctionDef[] = [];
  #imports: Import[] = [];
  #globals: { name: string; type: Type; mutable: boolean; init: Ref }[] = [];
  #exports: { name: string; kind: number; internal: string }[] = [];
  #custom: { name: string; bytes: Uint8Array }[] = [];
  #memory: { initial: number; maximum: number; shared: boolean; import?: Import } | undefined;
  #binary: Uint8Array | undefined;

  #add(node: Node): Ref {
    return this.#nodes.push(node) - 1;
  }
  #op(op: OpCode, kids: readonly Ref[], imm: readonly number[] = []): Ref {
    return this.#add({
      kind: "op",
      type: op.type,
      kids,
      code: imm.length ? [...op.code, ...imm] : op.code,
    });
  }
  #type(e: Ref): Type {
    return this.#nodes[e].type;
  }
  #fns<T extends Record<string, OpCode>, F>(ops: T, arity: number): Fns<T, F> {
    return Object.fromEntries(
      Object.entries(ops).map(([name, op]) => [
        name,
        arity === 1
          ? (a: Ref) => this.#op(op, [a])
          : arity === 2
          ? (a: Ref, b: Ref) => this.#op(op, [a, b])
          : (a: Ref, b: Ref, c: Ref) => this.#op(op, [a, b, c]),
      ]),
    ) as Fns<T, F>;
  }
  #memoryOps(space: keyof typeof MEMORY, type: Type): MemoryOps {
    const [load, store, natural] = MEMORY[space];
    const code = (op: number | readonly number[]) => ({
      code: typeof op === "number" ? [op] : op,
      type,
    });
    const memarg = (offset: number, align: number) => memoryArgument(offset, align || natural);
    return {
      load: (offset, align, ptr) => this.#op(code(load), [ptr], memarg(offset, align)),
      store: (offset, align, ptr, value) =>
        this.#op({ ...code(store), type: TYPES.none }, [ptr, value], memarg(offset, align)),
    };
  }
  #float(ops: FloatOps, space: "f32" | "f64"): FloatInstructions {
    const type = TYPES[space], conv = CONVERSIONS[space];
    const bytes = (value: number) => {
      const b = new Uint8Array(space === "f32" ? 4 : 8), view = new DataView(b.buffer);
      if (space === "f32") view.setFloat32(0, value, true);
      else view.setFloat64(0, value, true);
      return [...b];
    };
    return {
      ...this.#fns<FloatOps["unary"], Fn1>(ops.unary, 1),
      ...this.#fns<FloatOps["binary"], Fn2>(ops.binary, 2),
      ...this.#memoryOps(space, type),
      const: (value: number) => this.#op({ code: [CONST[space]], type }, [], bytes(value)),
      convert_s: { i32: (a: Ref) => this.#op(conv.convert_s.i32, [a]) },
      convert_u: { i32: (a: Ref) => this.#op(conv.convert_u.i32, [a]) },
    };
  }
  #lanes<L extends Lanes<string, string, string, string>>(ops: L): LaneOps<L> {
    return {
      ...this.#fns(ops.unary, 1),
      ...this.#fns(ops.binary, 2),
      ...this.#fns(ops.ternary, 3),
      ...this.#fns(ops.shifts, 2),
      splat: (a: Ref) => this.#op(ops.splat, [a]),
      extract_lane: (vec: Ref, lane: number) => this.#op(ops.extract, [vec], [lane]),
      replace_lane: (vec: Ref, lane: number, value: Ref) =>
        this.#op(ops.replace, [vec, value], [lane]),
    } as unknown as LaneOps<L>;
  }

  /** i32 instructions. */
  readonly i32: I32Ops = {
    ...this.#fns<typeof I32_UNARY, Fn1>(I32_UNARY, 1),
    ...this.#fns<typeof I32_BINARY, Fn2>(I32_BINARY, 2),
    ...this.#memoryOps("i32", TYPES.i32),
    const: (value: number) => this.#op({ code: [CONST.i32], type: TYPES.i32 }, [], sleb(value | 0)),
    trunc_s_sat: {
      f32: (a: Ref) => this.#op(CONVERSIONS.i32.trunc_s_sat.f32, [a]),
      f64: (a: Ref) => this.#op(CONVERSIONS.i32.trunc_s_sat.f64, [a]),
    },
    trunc_u_sat: {
      f32: (a: Ref) => this.#op(CONVERSIONS.i32.trunc_u_sat.f32, [a]),
      f64: (a: Ref) => this.#op(CONVERSIONS.i32.trunc_u_sat.f64, [a]),
    },
    store8: (offset: number, ptr: Ref, value: Ref) =>
      this.#op({ code: [STORE8], type: TYPES.none }, [ptr, value], memoryArgument(offset, 1)),
    load8_u: (offset: number, ptr: Ref) =>
      this.#op({ code: [LOAD8_U], type: TYPES.i32 }, [ptr], memoryArgument(offset, 1)),
  };
  /** f32 instructions. */
  readonly f32: FloatInstructions & { demote: Fn1; reinterpret: Fn1 } = {
    ...this.#float(F32, "f32"),
    demote: (a: Ref) => this.#op(CONVERSIONS.f32.demote, [a]),
    reinterpret: (a: Ref) => this.#op(CONVERSIONS.f32.reinterpret, [a]),
  };
  /** f64 instructions. */
  readonly f64: FloatInstructions & { promote: Fn1 } = {
    ...this.#float(F64, "f64"),
    promote: (a: Ref) => this.#op(CONVERSIONS.f64.promote, [a]),
  };
  /** v128 instructions. */
  readonly v128: V128Ops = {
    ...this.#fns<typeof V128.unary, Fn1>(V128.unary, 1),
    ...this.#fns<typeof V128.binary, Fn2>(V128.binary, 2),
    ...this.#fns<typeof V128.ternary, Fn3>(V128.ternary, 3),
    ...this.#memoryOps("v128", TYPES.v128),
    const: (bytes: readonly number[]) =>
      this.#op({ code: CONST.v128, type: TYPES.v128 }, [], bytes),
    load32_splat: (offset: number, align: number, ptr: Ref) =>
      this.#op({ code: LOAD32_SPLAT, type: TYPES.v128 }, [ptr], memoryArgument(offset, align || 4)),
  };
  /** i8x16 instructions. */
  readonly i8x16 = {
    /** Lanes of `a` and `b` (0–31) picked by `mask`'s 16 bytes. */
    shuffle: (a: Ref, b: Ref, mask: readonly number[]): Ref =>
      this.#op(I8X16.shuffle, [a, b], mask),
    /** `a` (an i32) in every byte lane. */
    splat: (a: Ref): Ref => this.#op(I8X16.splat, [a]),
    /** Each byte lane shifted right by `bits` (an i32), zeros in. */
    shr_u: (a: Ref, bits: Ref): Ref => this.#op(I8X16.shr_u, [a, bits]),
    /** Two i16x8 to sixteen signed byte lanes, saturating. */
    narrow_i16x8_s: (a: Ref, b: Ref): Ref => this.#op(I8X16.narrow_i16x8_s, [a, b]),
    /** Two i16x8 to sixteen unsigned byte lanes, saturating. */
    narrow_i16x8_u: (a: Ref, b: Ref): Ref => this.#op(I8X16.narrow_i16x8_u, [a, b]),
  };
  /** i16x8 instructions. */
  readonly i16x8: LaneOps<typeof I16X8> = this.#lanes(I16X8);
  /** i32x4 instructions. */
  readonly i32x4: LaneOps<typeof I32X4> = this.#lanes(I32X4);
  /** i64x2 instructions. */
  readonly i64x2: LaneOps<typeof I64X2> = this.#lanes(I64X2);
  /** f32x4 instructions. */
  readonly f32x4: LaneOps<typeof F32X4> = this.#lanes(F32X4);
  /** f64x2 instructions. */
  readonly f64x2: LaneOps<typeof F64X2> = this.#lanes(F64X2);
  /** Locals. */
  readonly local = {
    /** Local `index`'s value, of `type`. */
    get: (index: number, type: Type): Ref =>
      this.#add({ kind: "op", type, kids: [], code: [0x20, ...uleb(index)] }),
    /** Sets local `index` to `value`. */
    set: (index: number, value: Ref): Ref =>
      this.#add({ kind: "op", type: TYPES.none, kids: [value], code: [0x21, ...uleb(index)] }),
  };

  /** `children` in order, under `label` (a branch to it leaves the block). */
  block(label: string | null, children: readonly Ref[], type?: Type): Ref {
    const last = children.length ? this.#type(children[children.length - 1]) : TYPES.none;
    // A named block may be a branch's target, which goes on after it: never unreachable.
    const inferred = label !== null && last === TYPES.unreachable ? TYPES.none : last;
    return this.#add({ kind: "block", type: type ?? inferred, label, kids: [...children] });
  }
  /** `body` under `label` (a branch to it runs `body` again). */
  loop(label: string | null, body: Ref): Ref {
    return this.#add({ kind: "loop", type: this.#type(body), label, body });
  }
  /** `ifTrue` where `condition` is not 0, else `ifFalse`. */
  if(condition: Ref, ifTrue: Ref, ifFalse?: Ref): Ref {
    const type = ifFalse === undefined
      ? TYPES.none
      : this.#type(ifTrue) === TYPES.unreachable
      ? this.#type(ifFalse)
      : this.#type(ifTrue);
    return this.#add({
      kind: "if",
      type,
      kids: ifFalse === undefined ? [condition, ifTrue] : [condition, ifTrue, ifFalse],
    });
  }
  /** A branch to `label`: always, or where `condition` is not 0. */
  br(label: string, condition?: Ref, value?: Ref): Ref {
    const kids = [value, condition].filter((e) => e !== undefined);
    const type = condition === undefined
      ? TYPES.unreachable
      : value === undefined
      ? TYPES.none
      : this.#type(value);
    return this.#add({ kind: "br", type, label, kids, conditional: condition !== undefined });
  }
  /** `ifTrue` where `condition` is not 0, else `ifFalse` (both evaluated). */
  select(condition: Ref, ifTrue: Ref, ifFalse: Ref): Ref {
    const type = this.#type(ifTrue) === TYPES.unreachable
      ? this.#type(ifFalse)
      : this.#type(ifTrue);
    return this.#add({ kind: "op", type, kids: [ifTrue, ifFalse, condition], code: [0x1b] });
  }
  /** A call of function (or import) `name`. */
  call(name: string, operands: readonly Ref[], returnType: Type): Ref {
    return this.#add({ kind: "call", type: returnType, name, kids: [...operands] });
  }
  /** A return, of `value` where the function has a result. */
  return(value?: Ref): Ref {
    return this.#add({
      kind: "op",
      type: TYPES.unreachable,
      kids: value === undefined ? [] : [value],
      code: [0x0f],
    });
  }

  /** Adds function `name` with parameters `params` (see {@linkcode createType}) and locals `vars`. */
  addFunction(name: string, params: Type, results: Type, vars: readonly Type[], body: Ref): void {
    this.#functions.push({ name, params, results, vars: [...vars], body });
    this.#binary = undefined;
  }
  /** Adds an import of function `module.base`, called as `name`. */
  addFunctionImport(name: string, module: string, base: string, params: Type, results: Type): void {
    this.#imports.push({ name, module, base, params, results });
    this.#binary = undefined;
  }
  /** Exports function `internal` as `external`. */
  addFunctionExport(internal: string, external: string): void {
    this.#exports.push({ name: external, kind: 0, internal });
    this.#binary = undefined;
  }
  /** Adds global `name` of `type`, initialized by constant expression `init`. */
  addGlobal(name: string, type: Type, mutable: boolean, init: Ref): void {
    this.#globals.push({ name, type, mutable, init });
    this.#binary = undefined;
  }
  /** Exports global `internal` as `external`. */
  addGlobalExport(internal: string, external: string): void {
    this.#exports.push({ name: external, kind: 3, internal });
    this.#binary = undefined;
  }
  /**
   * Adds custom section `name` holding `bytes`: facts about the module that its loader reads
   * through `WebAssembly.Module.customSections` before instantiating it.
   */
  addCustomSection(name: string, bytes: Uint8Array): void {
    this.#custom.push({ name, bytes });
    this.#binary = undefined;
  }
  /** The module's memory: `initial` and `maximum` pages of 64 KiB, shared between threads or not. */
  setMemory(initial: number, maximum: number, shared = false): void {
    this.#memory = { initial, maximum, shared };
    this.#binary = undefined;
  }
  /** Imports the memory (set by {@linkcode setMemory}) as `module.base`. */
  addMemoryImport(module: string, base: string): void {
    if (!this.#memory) throw internal("addMemoryImport before setMemory");
    this.#memory.import = { name: "memory", module, base };
    this.#binary = undefined;
  }

  /** Whether the module is valid WebAssembly (the engine's validator on its binary). */
  validate(): boolean {
    return WebAssembly.validate(this.emitBinary() as Uint8Array<ArrayBuffer>);
  }

  /** The module in the binary format (written once until the module changes). */
  emitBinary(): Uint8Array {
    return this.#binary ??= this.#write();
  }

  #write(): Uint8Array {
    const signatures: string[] = [], sigBytes: number[][] = [];
    const signature = (params: Type, results: Type): number => {
      const bytes = [
        0x60,
        ...vec(typesOf(params).map((t) => [t])),
        ...vec(typesOf(results).map((t) => [t])),
      ];
      const key = bytes.join(",");
      let i = signatures.indexOf(key);
      if (i < 0) i = signatures.push(key) - 1, sigBytes.push(bytes);
      return i;
    };
    const fnIndex = new Map<string, number>();
    const imports = this.#imports.map((imp, i) => {
      fnIndex.set(imp.name, i);
      return [
        ...name(imp.module),
        ...name(imp.base),
        0x00,
        ...uleb(signature(imp.params!, imp.results!)),
      ];
    });
    const mem = this.#memory;
    const limits = mem
      ? [mem.shared ? 0x03 : 0x01, ...uleb(mem.initial), ...uleb(mem.maximum)]
      : [];
    if (mem?.import) {
      imports.push([...name(mem.import.module), ...name(mem.import.base), 0x02, ...limits]);
    }
    this.#functions.forEach((f, i) => fnIndex.set(f.name, this.#imports.length + i));
    const types = this.#functions.map((f) => uleb(signature(f.params, f.results)));
    const globalIndex = new Map(this.#globals.map((g, i) => [g.name, i]));
    const globals = this.#globals.map((
      g,
    ) => [g.type, g.mutable ? 1 : 0, ...this.#expr(g.init, fnIndex), 0x0b]);
    const exports = this.#exports.map((e) => {
      const index = e.kind === 0 ? fnIndex.get(e.internal) : globalIndex.get(e.internal);
      if (index === undefined) throw internal(`export of unknown ${e.internal}`);
      return [...name(e.name), e.kind, ...uleb(index)];
    });
    const code = this.#functions.map((f) => {
      const groups: number[][] = [];
      for (let i = 0; i < f.vars.length;) {
        let j = i;
        while (j < f.vars.length && f.vars[j] === f.vars[i]) j++;
        groups.push([...uleb(j - i), f.vars[i]]);
        i = j;
      }
      const body = [...vec(groups), ...this.#expr(f.body, fnIndex, true), 0x0b];
      return [...uleb(body.length), ...body];
    });
    return new Uint8Array([
      0x00,
      0x61,
      0x73,
      0x6d,
      0x01,
      0x00,
      0x00,
      0x00,
      ...section(1, sigBytes),
      ...section(2, imports),
      ...section(3, types),
      ...(mem && !mem.import ? section(5, [limits]) : []),
      ...section(6, globals),
      ...section(7, exports),
      ...section(10, code),
      ...this.#custom.flatMap(({ name: n, bytes }) => {
        const content = [...name(n), ...bytes];
        return [0, ...uleb(content.length), ...content];
      }),
    ]);
  }

  /** Expression `root`'s instructions (`body`: as a function's body, its own block unwrapped). */
  #expr(root: Ref, fnIndex: Map<string, number>, body = false): number[] {
    const out: number[] = [], labels: (string | null)[] = [], nodes = this.#nodes;
    const blockType = (t: Type) => (t === TYPES.unreachable ? TYPES.none : t);
    // An unnamed block's children in place of the block where the enclosing construct is a block
    // of the same type anyway (a loop's or an arm's body, a function's), as Binaryen writes them.
    const contents = (e: Ref) => {
      const n = nodes[e];
      if (n.kind === "block" && n.label === null) { for (const k of n.kids) emit(k); }
      else emit(e);
    };
    // After a construct that never completes, what follows is typed as unreachable code (the
    // construct's own block type is empty): `unreachable` makes the stack say so, as Binaryen does.
    const emit = (e: Ref): void => {
      const n = nodes[e];
      construct(n);
      if (n.kind !== "op" && n.kind !== "br" && n.kind !== "call" && n.type === TYPES.unreachable) {
        out.push(0x00);
      }
    };
    const construct = (n: Node): void => {
      switch (n.kind) {
        case "op":
          for (const k of n.kids) emit(k);
          for (const b of n.code) out.push(b);
          return;
        case "block":
          out.push(0x02, blockType(n.type));
          labels.push(n.label);
          for (const k of n.kids) emit(k);
          labels.pop();
          out.push(0x0b);
          return;
        case "loop":
          out.push(0x03, blockType(n.type));
          labels.push(n.label);
          contents(n.body);
          labels.pop();
          out.push(0x0b);
          return;
        case "if":
          emit(n.kids[0]);
          out.push(0x04, blockType(n.type));
          labels.push(null);
          contents(n.kids[1]);
          if (n.kids.length > 2) out.push(0x05), contents(n.kids[2]);
          labels.pop();
          out.push(0x0b);
          return;
        case "br": {
          for (const k of n.kids) emit(k);
          const at = labels.lastIndexOf(n.label);
          if (at < 0) throw internal(`branch to ${n.label} outside it`);
          out.push(n.conditional ? 0x0d : 0x0c, ...uleb(labels.length - 1 - at));
          return;
        }
        case "call": {
          for (const k of n.kids) emit(k);
          const index = fnIndex.get(n.name);
          if (index === undefined) throw internal(`call of unknown function ${n.name}`);
          out.push(0x10, ...uleb(index));
          return;
        }
      }
    };
    if (body) contents(root);
    else emit(root);
    return out;
  }
}

/** The encoder's library object: the value types, {@linkcode createType} and the module class. */
export const wasm = { ...TYPES, createType, Module: WasmModule } as const;

/** The encoder library's type (what code generators receive). */
export type Wasm = typeof wasm;

const internal = (what: string) =>
  new KilnError(`wasm encoder: ${what}`, {
    code: "internal",
    fix: "report this kernel (kiln explain shows it); compile for another backend meanwhile",
  });

/** `i32.store8`. */
const STORE8 = 0x3a;
/** `i32.load8_u`. */
const LOAD8_U = 0x2d;

/** A memory instruction's immediate: log2 of the alignment (bytes), then the offset. */
function memoryArgument(offset: number, align: number): number[] {
  return [Math.log2(align), ...uleb(offset)];
}

/** Unsigned LEB128. */
function uleb(n: number): number[] {
  const out: number[] = [];
  do {
    let b = n & 0x7f;
    n >>>= 7;
    if (n !== 0) b |= 0x80;
    out.push(b);
  } while (n !== 0);
  return out;
}

/** Signed LEB128 of a 32-bit integer. */
function sleb(n: number): number[] {
  const out: number[] = [];
  for (;;) {
    const b = n & 0x7f;
    n >>= 7;
    if ((n === 0 && (b & 0x40) === 0) || (n === -1 && (b & 0x40) !== 0)) return out.push(b), out;
    out.push(b | 0x80);
  }
}

/** A vector: its count, then its items. */
const vec = (
  items: readonly (readonly number[])[],
): number[] => [...uleb(items.length), ...items.flat()];
/** A UTF-8 name. */
const name = (s: string): number[] => vec([...new TextEncoder().encode(s)].map((b) => [b]));
/** Section `id` of `items` (omitted when empty). */
const section = (id: number, items: readonly (readonly number[])[]): number[] => {
  if (!items.length) return [];
  const content = vec(items);
  return [id, ...uleb(content.length), ...content];
};
