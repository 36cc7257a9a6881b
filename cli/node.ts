#!/usr/bin/env node
/**
 * The `kiln` executable of the npm package (`npx kiln run model.onnx`): the CLI's `main` with
 * Node's arguments, its result as the exit code. Under Deno, `deno task kiln` runs `cli/mod.ts`.
 *
 * @module
 */
import process from "node:process";
import { main } from "./mod.ts";

process.exitCode = await main(process.argv.slice(2));
