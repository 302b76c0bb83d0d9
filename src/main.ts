#!/usr/bin/env bun
/**
 * gpu-turnstile entry point: wiring only. The service integration comes first (the Windows SCM
 * must be answered within seconds of our start); every command lives in src/cli/.
 */
import { runCli } from "./cli/index.ts";
import { runAsServiceIfRequested } from "./service/index.ts";

const { argv, host } = await runAsServiceIfRequested(process.argv.slice(2));
await runCli(argv, host);
