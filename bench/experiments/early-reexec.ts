/**
 * Start-up experiment: the turnstile's entry with the fetch-limit re-run decided first, before
 * any of the application is loaded (src/main.ts loads the CLI, and with it the whole bundle,
 * before it decides). Built with `bun build --compile --bytecode` by `experiments/run.ts startup`.
 */
const LIMIT = "BUN_CONFIG_MAX_HTTP_REQUESTS";
const args = process.argv.slice(2);
const serving = args.length === 0 || args[0] === "run" || args[0] === "demo";
if (serving && !process.env[LIMIT] && !process.env.NOTIFY_SOCKET) {
  const compiled = process.argv[1]?.startsWith("/$bunfs/") ?? false;
  const self = compiled ? [process.execPath] : [process.execPath, process.argv[1]!];
  const child = Bun.spawn([...self, ...args], { env: { ...process.env, [LIMIT]: "65535" }, stdio: ["inherit", "inherit", "inherit"] });
  for (const sig of ["SIGINT", "SIGTERM", "SIGHUP"] as const) process.on(sig, () => child.kill(sig));
  process.exit(await child.exited);
} else {
  await import("../../src/main.ts");
}
export {};
