/**
 * The command line, with citty. Legacy spellings are normalised first (argv.ts); every command
 * module is imported lazily so platform code (systemd, Windows) loads only when used.
 */
import { useColor, stripColor } from "../runtime/color.ts";
import type { ArgsDef, CommandDef } from "citty";
import type { ServiceHost } from "../service/index.ts";
import { VERSION } from "../version.ts";
import { normalizeArgv, UsageError, type CommandName, type Normalized } from "./argv.ts";

/**
 * citty's defineCommand is the identity (it exists for the types); citty itself loads only when
 * a command line needs parsing — importing it is ~1.5 ms of a compiled start (docs/BENCHMARKS.md),
 * and the plain start (`gpu-turnstile` with no arguments) needs none.
 */
const defineCommand = <T extends ArgsDef>(def: CommandDef<T>): CommandDef<T> => def;

const configArg = { type: "string", description: "env-style config file (also -config <path>)", valueHint: "path" } as const;

export const installServiceArgs = {
  config: configArg,
  "no-copy": { type: "boolean", description: "register this executable where it is; leave the config untouched" },
} as const satisfies ArgsDef;

/**
 * Whether install-service was told --no-copy. citty reads any `--no-X` as the negation of `X`, so
 * `--no-copy` arrives as `copy: false` and the flag's own name is never set (issue 21).
 */
export function noCopyFrom(args: Record<string, unknown>): boolean {
  return args.copy === false || args["no-copy"] === true;
}

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
    args: installServiceArgs,
    async run({ args }) {
      const { install } = await import("../service/index.ts");
      process.exitCode = await install({
        argv: givenArgv,
        configPath: args.config,
        noCopy: noCopyFrom(args),
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
  status: defineCommand({
    meta: { name: "status", description: "Show the running turnstile's GPU state, holders, waiters, image job and upstreams" },
    args: {
      config: configArg,
      url: { type: "string", description: "the instance to ask (default: from the config's LISTEN_*)", valueHint: "http://host:port" },
      json: { type: "boolean", description: "print the raw /turnstile/status document (with --watch: one JSON event per line)" },
      watch: { type: "boolean", description: "follow the events until Ctrl-C, reconnecting when the turnstile restarts" },
    },
    async run({ args }) {
      const { statusCommand } = await import("./status.ts");
      // Ctrl-C ends --watch quietly; without --watch it stays the usual interrupt.
      const stop = new AbortController();
      if (args.watch === true) process.once("SIGINT", () => stop.abort());
      process.exitCode = await statusCommand({ configPath: args.config, url: args.url, json: args.json === true, watch: args.watch === true, signal: stop.signal });
    },
  }),
  lease: defineCommand({
    meta: { name: "lease", description: "Borrow the whole GPU for a command: lease [--ttl 2h] [--holder NAME] -- <command> [args…]" },
    args: {
      config: configArg,
      url: { type: "string", description: "the instance to ask (default: from the config's LISTEN_*)", valueHint: "http://host:port" },
      ttl: { type: "string", description: "how long the lease lasts without a renewal (renewed while the command runs; at most LEASE_MAX_TTL)", valueHint: "2h" },
      holder: { type: "string", description: "the name the status page shows (default: the command's name)" },
    },
    async run({ args, rawArgs }) {
      const { leaseCommand } = await import("./lease.ts");
      const dash = rawArgs.indexOf("--");
      process.exitCode = await leaseCommand({
        configPath: args.config,
        url: args.url,
        ttl: args.ttl,
        holder: args.holder,
        command: dash < 0 ? [] : rawArgs.slice(dash + 1),
      });
    },
  }),
  release: defineCommand({
    meta: { name: "release", description: "Force-release the GPU: cut LLM streams, interrupt image jobs, revoke a lease" },
    args: {
      config: configArg,
      url: { type: "string", description: "the instance to ask (default: from the config's LISTEN_*)", valueHint: "http://host:port" },
    },
    async run({ args }) {
      const { releaseCommand } = await import("./lease.ts");
      process.exitCode = await releaseCommand({ configPath: args.config, url: args.url });
    },
  }),
  demo: defineCommand({
    meta: { name: "demo", description: "Watch it work: simulated Ollama and ComfyUI sharing one simulated GPU" },
    args: {
      once: { type: "boolean", description: "exit after the summary instead of staying up for manual tries" },
      "without-turnstile": { type: "boolean", description: "run the same workload straight at the simulators" },
      cards: { type: "string", description: "2: two simulated cards behind HAProxy (deploy/haproxy.cfg; needs haproxy installed)" },
      "sims-only": { type: "boolean", description: "only the simulated Ollama and ComfyUI, for a turnstile run by hand (prints how)" },
      llm: { type: "string", description: "the LLM-side kind to simulate: ollama, llama-server, llama-swap, lmstudio, vllm (see LLM_KIND)" },
      image: { type: "string", description: "the image-side kind to simulate: comfyui, a1111 (or forge), swarmui (see IMAGE_KIND)" },
    },
    async run({ args }) {
      if (args.llm !== undefined || args.image !== undefined) {
        const { runPairDemo } = await import("../demo/pair.ts");
        const pair = { llm: args.llm ?? "ollama", image: args.image ?? "comfyui" };
        process.exitCode = await runPairDemo({ ...pair, once: args.once === true, withoutTurnstile: args["without-turnstile"] === true });
        return;
      }
      if (args["sims-only"] === true) {
        const { runSimsOnly } = await import("../demo/sims-only.ts");
        process.exitCode = await runSimsOnly();
        return;
      }
      if (args.cards !== undefined && args.cards !== "1") {
        const { runCardsDemo } = await import("../demo/cards.ts");
        process.exitCode = await runCardsDemo({ cards: Number(args.cards), once: args.once === true });
        return;
      }
      const { runDemo } = await import("../demo/run.ts");
      process.exitCode = await runDemo({ once: args.once === true, withoutTurnstile: args["without-turnstile"] === true });
    },
  }),
  config: defineCommand({
    meta: { name: "config", description: "List every setting with its default and meaning; with --config, check a config file" },
    args: {
      sample: { type: "boolean", description: "print a complete config file to start from, every setting commented out" },
      config: { ...configArg, description: "check this config file without starting: every setting, its value and where it came from" },
    },
    async run({ args }) {
      const { configCommand, checkConfigCommand } = await import("./config.ts");
      if (args.config === undefined) return void process.stdout.write(configCommand({ sample: args.sample === true, version: VERSION }));
      const { configAnchor } = await import("./serve.ts");
      process.exitCode = checkConfigCommand({
        configPath: args.config,
        env: process.env,
        execPath: configAnchor(),
        out: (s) => void process.stdout.write(s),
        err: (s) => void process.stderr.write(s),
      });
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
  // citty prints "v" + version: only a tag-like version reads right that way ("dev" would be "vdev").
  meta: {
    name: "gpu-turnstile",
    version: VERSION.startsWith("v") ? VERSION.slice(1) : undefined,
    description: "One GPU, two tenants: Ollama and ComfyUI take turns",
  },
  args: { config: { ...configArg, description: "env-style config file for run, the default command (also -config <path>)" } },
  subCommands: {
    ...commands,
    help: defineCommand({ meta: { name: "help", description: "Show this help, or a command's: help <command>" } }),
  },
});

const SETTINGS_POINTER = "Settings (ports, upstream URLs, timeouts, logging): gpu-turnstile config --help lists every one.\n";

/** The usage `--help` (or `help`) asked for, plain unless stdout is a terminal that wants colour. */
async function usage(n: Normalized): Promise<string> {
  const { renderUsage } = await import("citty");
  let text = n.named ? `${await renderUsage(commands[n.command], main)}\n` : `${await renderUsage(main)}\n`;
  if (!n.named || n.command === "run") text += SETTINGS_POINTER;
  if (n.named && n.command === "config") text += (await import("./config.ts")).settingsHelp();
  // citty pads the last column to the widest entry.
  return (useColor(process.stdout) ? text : stripColor(text)).replace(/[ \t]+$/gm, "");
}

export async function runCli(argv: readonly string[], serviceHost?: ServiceHost): Promise<void> {
  host = serviceHost;
  givenArgv = argv;
  if (host?.problem) process.stderr.write(`gpu-turnstile: ${host.problem}\n`);
  let n;
  try {
    n = normalizeArgv(argv);
  } catch (err) {
    if (!(err instanceof UsageError)) throw err;
    const help = err.command && err.command !== "run" ? `gpu-turnstile ${err.command} --help` : "gpu-turnstile --help";
    process.stderr.write(`gpu-turnstile: ${err.message}\nRun "${help}" for usage.\n`);
    process.exit(2);
  }
  if (n.command === "run" && n.args.length === 0 && !n.help) return runTurnstile(undefined);
  if (n.help) {
    process.stdout.write(await usage(n));
    return;
  }
  const { runCommand } = await import("citty");
  await runCommand(commands[n.command], { rawArgs: n.args });
}
