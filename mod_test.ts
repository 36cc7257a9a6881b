import assert from "node:assert/strict";
import { VERSION } from "./jit/support/version.ts";

Deno.test("mod.ts works when imported by URL from a project without our deno.json", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const main = `${dir}/main.ts`;
    const url = new URL("./mod.ts", import.meta.url).href;
    await Deno.writeTextFile(
      main,
      `import * as kiln from "${url}";
const y = kiln.tensor([[1, 2], [3, 4]]).mul(2).sum(-1);
console.log(JSON.stringify(Array.from(await y.data())));`,
    );
    const out = await new Deno.Command(Deno.execPath(), {
      args: ["run", "--no-config", "--no-lock", "-A", main],
      cwd: dir,
      stdout: "piped",
      stderr: "piped",
    }).output();
    const stderr = new TextDecoder().decode(out.stderr);
    assert.equal(out.code, 0, stderr);
    assert.equal(new TextDecoder().decode(out.stdout).trim(), "[6,14]");
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("the version constant matches deno.json", async () => {
  const config = JSON.parse(await Deno.readTextFile(new URL("./deno.json", import.meta.url)));
  assert.equal(VERSION, config.version);
  assert.equal(config.name, "@kiln/kiln");
});
