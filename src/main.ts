#!/usr/bin/env bun
/**
 * gpu-turnstile entry point: wiring only. Every command lives in src/cli/.
 */
import { runCli } from "./cli/index.ts";

await runCli(process.argv.slice(2));
