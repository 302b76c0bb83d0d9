/**
 * The SPEC's command-line spellings, mapped onto our subcommands before citty parses them:
 * Go-style single-dash `-config <path>`, the flag forms `--install-service`, `--remove-service`,
 * `--force-update`, `--version`, the legacy `service install|remove`, and `help [command]`. Pure,
 * so every spelling is tested without running anything.
 */
export const COMMANDS = ["run", "version", "install-service", "remove-service", "force-update", "demo", "config", "status", "lease", "release"] as const;
export type CommandName = (typeof COMMANDS)[number];

const FLAG_COMMANDS: Record<string, CommandName> = {
  "--install-service": "install-service",
  "--remove-service": "remove-service",
  "--force-update": "force-update",
  "--version": "version",
  "-version": "version",
};

export interface FlagSpec {
  name: string;
  value: boolean;
  /** Added by the program itself (the Windows UAC relaunch), never offered to a user. */
  hidden?: true;
}

/** The flags each command accepts (after normalisation). `--help` is citty's and always allowed. */
export const COMMAND_FLAGS: Record<CommandName, FlagSpec[]> = {
  run: [{ name: "config", value: true }],
  version: [],
  "install-service": [
    { name: "config", value: true },
    { name: "no-copy", value: false },
    // Added by the Windows UAC relaunch so the elevated child can hand its output back.
    { name: "elevated-log", value: true, hidden: true },
  ],
  "remove-service": [{ name: "elevated-log", value: true, hidden: true }],
  "force-update": [
    { name: "config", value: true },
    { name: "elevated-log", value: true, hidden: true },
  ],
  status: [
    { name: "config", value: true },
    { name: "url", value: true },
    { name: "json", value: false },
    { name: "watch", value: false },
  ],
  lease: [
    { name: "config", value: true },
    { name: "url", value: true },
    { name: "ttl", value: true },
    { name: "holder", value: true },
  ],
  release: [
    { name: "config", value: true },
    { name: "url", value: true },
  ],
  demo: [
    { name: "once", value: false },
    { name: "without-turnstile", value: false },
    { name: "cards", value: true },
    { name: "sims-only", value: false },
    { name: "llm", value: true },
    { name: "image", value: true },
  ],
  config: [
    { name: "sample", value: false },
    { name: "config", value: true },
  ],
};

/** The words a user may type as a command, as listed in usage errors. */
const COMMAND_WORDS = [...COMMANDS, "help"].join(", ");

export class UsageError extends Error {
  override name = "UsageError";
  constructor(
    message: string,
    /** The command whose usage to point at, when the mistake is in its flags. */
    readonly command?: CommandName,
  ) {
    super(message);
  }
}

export interface Normalized {
  command: CommandName;
  /** Arguments for that command, flags in `--name` form. */
  args: string[];
  help: boolean;
  /** The command was given (`run --help` asks about run; a bare `--help` about the program). */
  named: boolean;
}

export function normalizeArgv(input: readonly string[]): Normalized {
  const rest: string[] = [];
  let command: CommandName | undefined;
  let help = false;
  const setCommand = (c: CommandName, spelled: string) => {
    if (command && command !== c) throw new UsageError(`"${spelled}" cannot be combined with "${command}"`);
    command = c;
  };
  for (let i = 0; i < input.length; i++) {
    const a = input[i]!;
    if (a === "--" && command === "lease") {
      // Everything after it is the leased command's, its own flags included.
      rest.push(...input.slice(i));
      break;
    } else if (a === "--help" || a === "-h" || a === "-help") {
      help = true;
    } else if (a in FLAG_COMMANDS) {
      setCommand(FLAG_COMMANDS[a]!, a);
    } else if (a === "-config" || a === "--config" || a === "--elevated-log") {
      // The value is taken here: a file named "config" or "demo" is not a command.
      rest.push(a.replace(/^-config/, "--config"));
      const value = input[i + 1];
      if (value !== undefined && !value.startsWith("-")) rest.push(input[++i]!);
    } else if (a.startsWith("-config=")) {
      rest.push(a.replace(/^-config/, "--config"));
    } else if (a === "-no-copy") {
      rest.push("--no-copy");
    } else if (!command && !help && rest.length === 0 && a === "help") {
      help = true;
      const topic = input[i + 1];
      if (topic === undefined || topic.startsWith("-")) continue;
      if (!(COMMANDS as readonly string[]).includes(topic)) throw new UsageError(`no command "${topic}" (commands: ${COMMAND_WORDS})`);
      setCommand(topic as CommandName, topic);
      i++;
    } else if (!command && rest.length === 0 && a === "service") {
      const sub = input[++i];
      if (sub === "install") setCommand("install-service", "service install");
      else if (sub === "remove" || sub === "uninstall") setCommand("remove-service", "service remove");
      else throw new UsageError(`"service" needs "install" or "remove"${sub ? `, got "${sub}"` : ""}`);
    } else if (!command && !a.startsWith("-") && (COMMANDS as readonly string[]).includes(a)) {
      setCommand(a as CommandName, a);
    } else {
      rest.push(a);
    }
  }
  const cmd = command ?? "run";
  const args = help ? rest : plainSwitches(cmd, rest);
  if (!help) checkFlags(cmd, args);
  return { command: cmd, args, help, named: command !== undefined };
}

/**
 * A switch given a value (`--no-copy=true`, `--json=false`) becomes the bare switch, or nothing:
 * citty would read `--no-copy=true` as a flag named "copy=true" and leave `copy` unset.
 */
function plainSwitches(command: CommandName, args: readonly string[]): string[] {
  const out: string[] = [];
  for (let i = 0; i < args.length; i++) {
    const a = args[i]!;
    if (a === "--" && command === "lease") return out.concat(args.slice(i));
    const m = /^--?([\w-]+)=(.*)$/.exec(a);
    const spec = m && COMMAND_FLAGS[command].find((f) => f.name === m[1] && !f.value);
    if (!m || !spec) {
      out.push(a);
      continue;
    }
    const v = m[2]!.toLowerCase();
    if (v === "true" || v === "1" || v === "yes") out.push(`--${spec.name}`);
    else if (v !== "false" && v !== "0" && v !== "no") throw new UsageError(`"--${spec.name}" is a switch: give it alone, not "=${m[2]}"`, command);
  }
  return out;
}

function checkFlags(command: CommandName, args: readonly string[]): void {
  const allowed = COMMAND_FLAGS[command];
  for (let i = 0; i < args.length; i++) {
    const a = args[i]!;
    if (a === "--" && command === "lease") return;
    if (!a.startsWith("-") && command === "lease") {
      throw new UsageError(`unexpected argument "${a}": put the command after "--", as in gpu-turnstile lease -- ${args.slice(i).join(" ")}`, command);
    }
    if (!a.startsWith("-")) {
      throw new UsageError(`unexpected argument "${a}"${command === "run" ? ` (commands: ${COMMAND_WORDS})` : ""}`, command);
    }
    const [name, inline] = a.replace(/^--?/, "").split("=", 2) as [string, string | undefined];
    const spec = allowed.find((f) => f.name === name);
    if (!spec) {
      const known = allowed
        .filter((f) => !f.hidden)
        .map((f) => `--${f.name}`)
        .join(", ");
      throw new UsageError(`unknown flag "${a}" for "${command}"${known ? ` (accepted: ${known})` : ""}`, command);
    }
    if (spec.value && inline === undefined) {
      const next = args[i + 1];
      if (next === undefined || next.startsWith("-")) throw new UsageError(`"--${name}" needs a value`, command);
      i++;
    }
  }
}
