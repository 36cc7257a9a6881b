import assert from "node:assert/strict";
import { KilnError } from "../../jit/support/errors.ts";
import { createType, wasm, WasmModule } from "./encoder.ts";
import {
  F32,
  F32X4,
  F64,
  F64X2,
  I32_BINARY,
  I32_UNARY,
  I32X4,
  I64X2,
  type Type,
  TYPES,
  V128,
} from "./opcodes.ts";

const { i32, f32, f64, v128, none } = TYPES;

/** `body` as exported function `f(params…)` of a module with a memory; its instance's `f`. */
function run(
  params: Type[],
  result: Type,
  body: (m: WasmModule, get: (i: number) => number) => number,
  vars: Type[] = [],
  host: Record<string, (...a: number[]) => number> = {},
): (...args: number[]) => number {
  const m = new WasmModule();
  m.setMemory(1, 1);
  for (const name of Object.keys(host)) {
    m.addFunctionImport(name, "env", name, createType([f64]), f64);
  }
  m.addFunction("f", createType(params), result, vars, body(m, (i) => m.local.get(i, params[i])));
  m.addFunctionExport("f", "f");
  assert.ok(m.validate(), "the module validates");
  const bytes = m.emitBinary() as Uint8Array<ArrayBuffer>;
  const instance = new WebAssembly.Instance(new WebAssembly.Module(bytes), { env: host });
  return instance.exports.f as (...args: number[]) => number;
}

Deno.test("every instruction of every namespace encodes to a module the engine validates", () => {
  let count = 0;
  const check = (
    params: Type[],
    result: Type,
    build: (m: WasmModule, g: (i: number) => number) => number,
  ) => {
    const m = new WasmModule();
    m.setMemory(1, 1);
    m.addFunction("f", createType(params), result, [], build(m, (i) => m.local.get(i, params[i])));
    assert.ok(m.validate(), `instruction ${count}`);
    count++;
  };
  type Ops = Record<string, (...a: number[]) => number>;
  const ns = (m: WasmModule, name: string) => (m as unknown as Record<string, Ops>)[name];
  for (const op of Object.keys(I32_UNARY)) {
    check([op === "reinterpret" ? f32 : i32], i32, (m, g) => ns(m, "i32")[op](g(0)));
  }
  for (const op of Object.keys(I32_BINARY)) {
    check([i32, i32], i32, (m, g) => ns(m, "i32")[op](g(0), g(1)));
  }
  for (const [name, ops, t] of [["f32", F32, f32], ["f64", F64, f64]] as const) {
    for (const op of Object.keys(ops.unary)) check([t], t, (m, g) => ns(m, name)[op](g(0)));
    for (const op of Object.keys(ops.binary)) {
      const r = ["eq", "ne", "lt", "gt", "le", "ge"].includes(op) ? i32 : t;
      check([t, t], r, (m, g) => ns(m, name)[op](g(0), g(1)));
    }
  }
  for (const op of Object.keys(V128.binary)) {
    check([v128, v128], v128, (m, g) => ns(m, "v128")[op](g(0), g(1)));
  }
  for (
    const [name, lanes, scalar] of [
      ["i32x4", I32X4, i32],
      ["i64x2", I64X2, TYPES.i64],
      ["f32x4", F32X4, f32],
      ["f64x2", F64X2, f64],
    ] as const
  ) {
    const unary = lanes.unary as Record<string, { type: Type }>;
    for (const op of Object.keys(unary)) {
      check([v128], unary[op].type, (m, g) => ns(m, name)[op](g(0)));
    }
    for (const op of Object.keys(lanes.binary)) {
      check([v128, v128], v128, (m, g) => ns(m, name)[op](g(0), g(1)));
    }
    for (const op of Object.keys(lanes.ternary)) {
      check([v128, v128, v128], v128, (m, g) => ns(m, name)[op](g(0), g(1), g(2)));
    }
    for (const op of Object.keys(lanes.shifts)) {
      check([v128, i32], v128, (m, g) => ns(m, name)[op](g(0), g(1)));
    }
    check([scalar], v128, (m, g) => ns(m, name).splat(g(0)));
    check([v128], scalar, (m, g) => ns(m, name).extract_lane(g(0), 1));
    check([v128, scalar], v128, (m, g) => ns(m, name).replace_lane(g(0), 1, g(1)));
  }
  assert.ok(count >= 174, `${count} instructions`);
});

Deno.test("constants keep their bits: i32 edges, f32 rounding, f64, v128 bytes", () => {
  for (const c of [0, 1, -1, 63, 64, -64, -65, 8191, 8192, 2 ** 31 - 1, -(2 ** 31), 2 ** 32 - 1]) {
    assert.equal(run([], i32, (m) => m.i32.const(c))(), c | 0, `i32 ${c}`);
  }
  assert.equal(run([], f32, (m) => m.f32.const(0.1))(), Math.fround(0.1));
  assert.ok(Number.isNaN(run([], f64, (m) => m.f64.const(NaN))()));
  assert.equal(run([], f64, (m) => m.f64.const(-1e300))(), -1e300);
  const bytes = Array.from({ length: 16 }, (_, i) => i * 17);
  const lane = run([], i32, (m) => m.i32x4.extract_lane(m.v128.const(bytes), 2));
  assert.equal(lane(), new Int32Array(new Uint8Array(bytes).buffer)[2]);
});

Deno.test("loops, named blocks and branches reach the labels they name", () => {
  // Σ i for i < n, leaving through a named block from inside a loop in an unnamed block.
  const sum = run([i32], i32, (m, g) =>
    m.block(null, [
      m.local.set(1, m.i32.const(0)),
      m.block("out", [
        m.loop(
          "again",
          m.block(null, [
            m.br("out", m.i32.eqz(g(0))),
            m.local.set(0, m.i32.sub(g(0), m.i32.const(1))),
            m.local.set(1, m.i32.add(m.local.get(1, i32), g(0))),
            m.br("again"),
          ]),
        ),
      ]),
      m.local.get(1, i32),
    ]), [i32]);
  assert.equal(sum(10), 45);
  assert.equal(sum(0), 0);
  // An `if` with a value, a select and a return out of nested blocks.
  const pick = run([i32, f32, f32], f32, (m, g) =>
    m.block(null, [
      m.if(m.i32.gt_s(g(0), m.i32.const(5)), m.return(m.f32.const(-1))),
      m.if(g(0), m.select(m.i32.lt_s(g(0), m.i32.const(3)), g(1), g(2)), m.f32.const(7)),
    ]));
  assert.deepEqual([pick(9, 1, 2), pick(1, 1, 2), pick(4, 1, 2), pick(0, 1, 2)], [-1, 1, 2, 7]);
});

Deno.test("a construct that never completes leaves the stack typed as unreachable", () => {
  // The loop only leaves by returning: an i32 block may end with it.
  const f = run([i32], i32, (m, g) =>
    m.block(null, [
      m.loop(
        "l",
        m.block(null, [
          m.if(m.i32.ge_s(g(0), m.i32.const(100)), m.return(g(0))),
          m.local.set(0, m.i32.mul(g(0), m.i32.const(3))),
          m.br("l"),
        ]),
      ),
    ], i32));
  assert.equal(f(1), 243);
});

Deno.test("memory, SIMD lanes, conversions and host calls compute what they name", () => {
  const f = run(
    [i32],
    f64,
    (m, g) =>
      m.block(null, [
        m.v128.store(
          0,
          16,
          g(0),
          m.f32x4.mul(m.f32x4.splat(m.f32.const(1.5)), m.f32x4.splat(m.f32.const(2))),
        ),
        m.f64.store(16, 8, g(0), m.f64.promote(m.f32.load(4, 4, g(0)))),
        m.f64.add(
          m.call("twice", [m.f64.load(16, 0, g(0))], f64),
          m.f64.convert_s.i32(m.i32.trunc_s_sat.f32(m.f32.const(-2.7))),
        ),
      ]),
    [],
    { twice: (x) => 2 * x },
  );
  assert.equal(f(64), 2 * 3 - 2);
  const shuffle = run([], i32, (m) =>
    m.i32x4.extract_lane(
      m.i8x16.shuffle(
        m.i32x4.splat(m.i32.const(1)),
        m.i32x4.splat(m.i32.const(2)),
        [16, 17, 18, 19, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3],
      ),
      0,
    ));
  assert.equal(shuffle(), 2);
  // load32_splat: the element at ptr + offset (7 at byte 8, past a 3 at 4) in every lane.
  const splat = run([i32], i32, (m, g) =>
    m.block(null, [
      m.i32.store(4, 4, g(0), m.i32.const(3)),
      m.i32.store(8, 4, g(0), m.i32.const(7)),
      m.i32x4.extract_lane(m.v128.load32_splat(8, 4, g(0)), 3),
    ]));
  assert.equal(splat(32), 7);
});

Deno.test("globals and exports: a constant global reads back, a shared memory imports", () => {
  const m = new wasm.Module();
  m.setMemory(1, 4, true);
  m.addMemoryImport("env", "memory");
  m.addGlobal("answer", wasm.i32, false, m.i32.const(42));
  m.addGlobalExport("answer", "answer");
  m.addFunction("f", wasm.none, wasm.none, [], m.block(null, []));
  assert.ok(m.validate());
  const memory = new WebAssembly.Memory({ initial: 1, maximum: 4, shared: true });
  const { exports } = new WebAssembly.Instance(
    new WebAssembly.Module(m.emitBinary() as Uint8Array<ArrayBuffer>),
    { env: { memory } },
  );
  assert.equal((exports.answer as WebAssembly.Global).value, 42);
});

Deno.test("a module written, then added to, is written anew", () => {
  const m = new WasmModule();
  m.addFunction("f", none, i32, [], m.i32.const(1));
  const before = m.emitBinary();
  m.addFunctionExport("f", "f");
  const after = m.emitBinary();
  assert.ok(after.length > before.length);
  const { exports } = new WebAssembly.Instance(
    new WebAssembly.Module(after as Uint8Array<ArrayBuffer>),
  );
  assert.equal((exports.f as () => number)(), 1);
});

Deno.test("a branch to no enclosing label or a call of no function is an internal KilnError", () => {
  const branch = new WasmModule();
  branch.addFunction("f", none, none, [], branch.block("a", [branch.br("b")]));
  assert.throws(
    () => branch.emitBinary(),
    (e) => e instanceof KilnError && /branch to b/.test(e.message),
  );
  const call = new WasmModule();
  call.addFunction("f", none, none, [], call.call("g", [], none));
  assert.throws(
    () => call.emitBinary(),
    (e) => e instanceof KilnError && /unknown function g/.test(e.message),
  );
});
