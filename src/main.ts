#!/usr/bin/env bun
/**
 * gpu-turnstile entry point: wiring only. Before anything heavy is loaded it decides whether to
 * re-run itself with Bun's fetch limit lifted (runtime/fetch-limit.ts), so that a console start
 * pays for one module load, not two. The service integration comes next (the Windows SCM must be
 * answered within seconds of our start), loaded only when a service manager started us. Every
 * command lives in src/cli/.
 */
import { commandOf } from "./cli/argv.ts";
import { ensureFetchLimit } from "./runtime/fetch-limit.ts";

const args = process.argv.slice(2);
const command = commandOf(args);
if (command === "run" || command === "demo") await ensureFetchLimit();

const managed = args.includes("--windows-service") || (process.platform === "linux" && !!process.env.NOTIFY_SOCKET);
const { argv, host } = managed
  ? await (await import("./service/index.ts")).runAsServiceIfRequested(args)
  : { argv: args, host: undefined };
const { runCli } = await import("./cli/index.ts");
await runCli(argv, host);
