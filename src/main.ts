#!/usr/bin/env bun
/**
 * gpu-turnstile entry point: wiring only. The service integration comes first (the Windows SCM
 * must be answered within seconds of our start), loaded only when a service manager started us.
 * Every command lives in src/cli/.
 */
const args = process.argv.slice(2);
const managed = args.includes("--windows-service") || (process.platform === "linux" && !!process.env.NOTIFY_SOCKET);
const { argv, host } = managed
  ? await (await import("./service/index.ts")).runAsServiceIfRequested(args)
  : { argv: args, host: undefined };
const { runCli } = await import("./cli/index.ts");
await runCli(argv, host);

export {};
