/**
 * The command line, with citty. Legacy spellings are normalised first (argv.ts); every command
 * module is imported lazily so platform code (systemd, Windows) loads only when used.
 */
import { defineCommand, renderUsage, runCommand, type CommandDef } from "citty";
import { VERSION } from "../version.ts";
import { COMMAND_FLAGS, normalizeArgv, UsageError, type CommandName } from "./argv.ts";

const configArg = { type: "string", description: "env-style config file (also -config <path>)", valueHint: "path" } as const;

const commands: Record<CommandName, CommandDef<any>> = {
  run: defineCommand({
    meta: { name: "run", description: "Run the turnstile (the default command)" },
    args: { config: configArg },
    async run({ args }) {
      const { serve } = await import("./serve.ts");
      const running = serve({ configPath: args.config });
      process.exitCode = await running.done;
    },
  }),
  version: defineCommand({
    meta: { name: "version", description: "Print the version (also --version)" },
    run() {
      process.stdout.write(`gpu-turnstile ${VERSION}\n`);
    },
  }),
  "install-service": defineCommand({
    meta: { name: "install-service", description: "Install and start the system service (also --install-service, service install)" },
    args: {
      config: configArg,
      "no-copy": { type: "boolean", description: "register this executable where it is; leave the config untouched" },
    },
    async run({ args }) {
      const { installService } = await import("./service.ts");
      process.exitCode = await installService({ configPath: args.config, noCopy: args["no-copy"] === true });
    },
  }),
  "remove-service": defineCommand({
    meta: { name: "remove-service", description: "Stop and remove the system service; the config stays (also --remove-service)" },
    async run() {
      const { removeService } = await import("./service.ts");
      process.exitCode = await removeService();
    },
  }),
  "force-update": defineCommand({
    meta: { name: "force-update", description: "Check for a signed release now and stage it (also --force-update)" },
    args: { config: configArg },
    async run({ args }) {
      const { forceUpdateCommand } = await import("./update.ts");
      process.exitCode = await forceUpdateCommand({ configPath: args.config });
    },
  }),
  demo: defineCommand({
    meta: { name: "demo", description: "Watch it work: simulated Ollama and ComfyUI sharing one simulated GPU" },
    args: {
      once: { type: "boolean", description: "exit after the summary instead of staying up for manual tries" },
      "without-turnstile": { type: "boolean", description: "run the same workload straight at the simulators" },
    },
    async run({ args }) {
      const { runDemo } = await import("../demo/run.ts");
      process.exitCode = await runDemo({ once: args.once === true, withoutTurnstile: args["without-turnstile"] === true });
    },
  }),
};

const main = defineCommand({
  meta: { name: "gpu-turnstile", version: VERSION.replace(/^v/, ""), description: "One GPU, two tenants: Ollama and ComfyUI take turns" },
  subCommands: commands,
});

export async function runCli(argv: readonly string[]): Promise<void> {
  let n;
  try {
    n = normalizeArgv(argv);
  } catch (err) {
    if (!(err instanceof UsageError)) throw err;
    process.stderr.write(`gpu-turnstile: ${err.message}\nRun "gpu-turnstile --help" for usage.\n`);
    process.exit(2);
  }
  if (n.help) {
    const cmd = argv.length === 1 || n.command === "run" ? main : commands[n.command];
    process.stdout.write((await renderUsage(cmd, cmd === main ? undefined : main)) + "\n");
    return;
  }
  if (n.command === "run" || COMMAND_FLAGS[n.command].length > 0 || n.command === "demo") {
    if (n.command === "run" || n.command === "demo") {
      const { ensureFetchLimit } = await import("../runtime/fetch-limit.ts");
      await ensureFetchLimit();
    }
  }
  await runCommand(commands[n.command], { rawArgs: n.args });
}
