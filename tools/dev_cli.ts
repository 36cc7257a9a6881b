/**
 * What the development CLIs (`deno task test:onnx`, `deno task fuzz`) share: `--help` prints
 * their usage, and an unknown or malformed option is a usage error (exit 2) with that usage, as
 * in `kiln` itself, not a stack trace.
 *
 * @module
 */

/** Runs `main` on `args`, or prints `usage` for `--help` (exit 0) or a parse error (exit 2). */
export async function devMain(
  usage: string,
  args: readonly string[],
  main: () => Promise<number>,
): Promise<number> {
  if (args.includes("--help") || args.includes("-h")) {
    console.log(usage);
    return 0;
  }
  try {
    return await main();
  } catch (e) {
    if (!(e as { code?: string }).code?.startsWith("ERR_PARSE_ARGS")) throw e;
    console.error(`${(e as Error).message}\n\n${usage}`);
    return 2;
  }
}
