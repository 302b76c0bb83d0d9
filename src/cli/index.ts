/**
 * The command line, with citty. Legacy spellings are normalised first (argv.ts); every command
 * module is imported lazily so platform code (systemd, Windows) loads only when used.
 */
import type { ArgsDef, CommandDef } from "citty";
import type { ServiceHost } from "../service/index.ts";
import { VERSION } from "../version.ts";
import { normalizeArgv, UsageError, type CommandName } from "./argv.ts";

/**
 * citty's defineCommand is the identity (it exists for the types); citty itself loads only when
 * a command line needs parsing — importing it is ~1.5 ms of a compiled start (docs/BENCHMARKS.md),
 * and the plain start (`gpu-turnstile` with no arguments) needs none.
 */
const defineCommand = <T extends ArgsDef>(def: CommandDef<T>): CommandDef<T> => def;

const configArg = { type: "string", description: "env-style config file (also -config <path>)", valueHint: "path" } as const;

/** The service manager we report to (a no-op on a console run); set by runCli. */
let host: ServiceHost | undefined;
/** This invocation's arguments as given: the Windows UAC relaunch repeats them. */
let givenArgv: readonly string[] = [];

const commands: Record<CommandName, CommandDef<any>> = {
  run: defineCommand({
    meta: { name: "run", description: "Run the turnstile (the default command)" },
    args: { config: configArg },
    run: ({ args }) => runTurnstile(args.config),
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
      const { install } = await import("../service/index.ts");
      process.exitCode = await install({
        argv: givenArgv,
        configPath: args.config,
        noCopy: args["no-copy"] === true,
        version: VERSION,
        elevatedLog: args["elevated-log"] as string | undefined,
      });
    },
  }),
  "remove-service": defineCommand({
    meta: { name: "remove-service", description: "Stop and remove the system service; the config stays (also --remove-service)" },
    async run({ args }) {
      const { remove } = await import("../service/index.ts");
      process.exitCode = await remove({ argv: givenArgv, elevatedLog: args["elevated-log"] as string | undefined });
    },
  }),
  "force-update": defineCommand({
    meta: { name: "force-update", description: "Check for a signed release now and stage it (also --force-update)" },
    args: { config: configArg },
    async run({ args }) {
      const { forceUpdateCommand } = await import("./update.ts");
      process.exitCode = await forceUpdateCommand({
        configPath: args.config,
        elevatedLog: args["elevated-log"] as string | undefined,
        argv: givenArgv,
      });
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

async function runTurnstile(configPath: string | undefined): Promise<void> {
  const { serve } = await import("./serve.ts");
  const running = await serve({ configPath, host });
  const code = await running.done;
  host?.stopped(code);
  process.exit(code);
}

const main = defineCommand({
  meta: { name: "gpu-turnstile", version: VERSION.replace(/^v/, ""), description: "One GPU, two tenants: Ollama and ComfyUI take turns" },
  subCommands: commands,
});

export async function runCli(argv: readonly string[], serviceHost?: ServiceHost): Promise<void> {
  host = serviceHost;
  givenArgv = argv;
  if (host?.problem) process.stderr.write(`gpu-turnstile: ${host.problem}\n`);
  let n;
  try {
    n = normalizeArgv(argv);
  } catch (err) {
    if (!(err instanceof UsageError)) throw err;
    process.stderr.write(`gpu-turnstile: ${err.message}\nRun "gpu-turnstile --help" for usage.\n`);
    process.exit(2);
  }
  if (n.command === "run" && n.args.length === 0 && !n.help) return runTurnstile(undefined);
  const { renderUsage, runCommand } = await import("citty");
  if (n.help) {
    const cmd = argv.length === 1 || n.command === "run" ? main : commands[n.command];
    process.stdout.write((await renderUsage(cmd, cmd === main ? undefined : main)) + "\n");
    return;
  }
  await runCommand(commands[n.command], { rawArgs: n.args });
}
