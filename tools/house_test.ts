/**
 * The house rules a maintainer relies on, checked on the source with Deno's own parser (a lint
 * plugin run by `Deno.lint.runPlugin`): no function over 120 lines, one statement a line. (The
 * file-size rule, 600 lines, is in `layers_test.ts`.)
 */
import assert from "node:assert/strict";
import { ROOT, sources } from "./source_files.ts";
import { readFileSync } from "node:fs";
import { join } from "node:path";

/** Longest function, in lines as `deno fmt` writes them. */
const MAX_FUNCTION_LINES = 120;

type Node = Deno.lint.Node;

/** A function's name: its declaration's, its variable's, its method's or property's key. */
function nameOf(
  node:
    | Deno.lint.FunctionDeclaration
    | Deno.lint.FunctionExpression
    | Deno.lint.ArrowFunctionExpression,
): string {
  if ("id" in node && node.id && node.id.type === "Identifier") return node.id.name;
  const parent = node.parent;
  if (parent?.type === "VariableDeclarator" && parent.id.type === "Identifier") {
    return parent.id.name;
  }
  if (
    (parent?.type === "MethodDefinition" || parent?.type === "Property") &&
    (parent.key.type === "Identifier" || parent.key.type === "PrivateIdentifier")
  ) return `${parent.key.type === "PrivateIdentifier" ? "#" : ""}${parent.key.name}`;
  return "(anonymous)";
}

/** Line number (1-based) of character `at` in `text`. */
const lineAt = (text: string, at: number) => text.slice(0, at).split("\n").length;

const house: Deno.lint.Plugin = {
  name: "house",
  rules: {
    "function-length": {
      create(ctx) {
        const check = (
          node:
            | Deno.lint.FunctionDeclaration
            | Deno.lint.FunctionExpression
            | Deno.lint.ArrowFunctionExpression,
        ) => {
          const text = ctx.sourceCode.text;
          const lines = lineAt(text, node.range[1]) - lineAt(text, node.range[0]) + 1;
          if (lines > MAX_FUNCTION_LINES) {
            ctx.report({ node, message: `${nameOf(node)} ${lines}` });
          }
        };
        return {
          FunctionDeclaration: check,
          FunctionExpression: check,
          ArrowFunctionExpression: check,
        };
      },
    },
    "one-statement-a-line": {
      create(ctx) {
        const check = (node: { body: readonly Node[] }) => {
          const text = ctx.sourceCode.text;
          for (let i = 1; i < node.body.length; i++) {
            const [prev, next] = [node.body[i - 1], node.body[i]];
            if (lineAt(text, prev.range[1]) === lineAt(text, next.range[0])) {
              ctx.report({ node: next, message: "a second statement on one line" });
            }
          }
        };
        return { BlockStatement: check, Program: check, StaticBlock: check };
      },
    },
  },
};

const files = sources();
const findings = files.flatMap((file) => {
  const text = readFileSync(join(ROOT, file), "utf8");
  return Deno.lint.runPlugin(house, file, text).map((d) => ({
    file,
    rule: d.id,
    message: d.message,
    line: lineAt(text, d.range[0]),
  }));
});

Deno.test("no function over 120 lines", () => {
  const long = findings.filter((f) => f.rule === "house/function-length")
    .map((f) => `${f.file}:${f.line}: ${f.message.replace(" ", " is ")} lines`);
  assert.deepEqual(long, [], "split them into named phases");
});

Deno.test("one statement a line", () => {
  const joined = findings.filter((f) => f.rule === "house/one-statement-a-line")
    .map((f) => `${f.file}:${f.line}`);
  assert.deepEqual(joined, []);
});

Deno.test("the house rules see what they check", () => {
  const source = [
    "function long() {",
    ...Array.from({ length: 120 }, (_, i) => `  const x${i} = ${i};`),
    "}",
    "const a = 1; const b = 2;",
  ].join("\n");
  const found = Deno.lint.runPlugin(house, "probe.ts", source).map((d) => d.message).sort();
  assert.deepEqual(found, ["a second statement on one line", "long 122"]);
});
