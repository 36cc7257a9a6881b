import assert from "node:assert/strict";
import { parseArgs } from "node:util";
import { devMain } from "./dev_cli.ts";

Deno.test("dev CLIs: --help prints the usage, a bad option is exit 2, other errors propagate", async () => {
  const parse = (args: string[]) => () =>
    Promise.resolve(parseArgs({ args, options: { n: { type: "string" } } }).values.n ? 5 : 0);
  assert.equal(await devMain("usage", ["--help"], parse(["--help"])), 0);
  assert.equal(await devMain("usage", ["--bogus"], parse(["--bogus"])), 2);
  assert.equal(await devMain("usage", ["--n", "1"], parse(["--n", "1"])), 5);
  await assert.rejects(
    devMain("usage", [], () => Promise.reject(new RangeError("a defect"))),
    RangeError,
  );
});
