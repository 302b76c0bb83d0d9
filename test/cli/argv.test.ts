import { describe, expect, test } from "bun:test";
import { UsageError, normalizeArgv } from "../../src/cli/argv.ts";
import type { Normalized } from "../../src/cli/argv.ts";

/** `named`: the command was spelled out, so `--help` is about it (every test command but the default run). */
const ok = (command: Normalized["command"], args: string[] = [], named = command !== "run"): Normalized => ({
  command,
  args,
  help: false,
  named,
});

describe("every documented spelling", () => {
  test.each([
    ["no arguments runs the turnstile", [], ok("run")],
    ["Go-style -config", ["-config", "/etc/gt.env"], ok("run", ["--config", "/etc/gt.env"])],
    ["--config", ["--config", "x.env"], ok("run", ["--config", "x.env"])],
    ["--config=", ["--config=x.env"], ok("run", ["--config=x.env"])],
    ["-config=", ["-config=x.env"], ok("run", ["--config=x.env"])],
    ["explicit run", ["run", "--config", "x"], ok("run", ["--config", "x"], true)],
    [
      "--install-service -config x --no-copy",
      ["--install-service", "-config", "x", "--no-copy"],
      ok("install-service", ["--config", "x", "--no-copy"]),
    ],
    ["-config before --install-service", ["-config", "x", "--install-service"], ok("install-service", ["--config", "x"])],
    ["Go-style -no-copy", ["--install-service", "-no-copy"], ok("install-service", ["--no-copy"])],
    ["install-service subcommand", ["install-service", "--config", "x"], ok("install-service", ["--config", "x"])],
    ["service install", ["service", "install"], ok("install-service")],
    ["service install -config x", ["service", "install", "-config", "x"], ok("install-service", ["--config", "x"])],
    ["service remove", ["service", "remove"], ok("remove-service")],
    ["service uninstall", ["service", "uninstall"], ok("remove-service")],
    ["--remove-service", ["--remove-service"], ok("remove-service")],
    ["remove-service subcommand", ["remove-service"], ok("remove-service")],
    ["--force-update", ["--force-update"], ok("force-update")],
    ["--force-update -config x", ["--force-update", "-config", "x"], ok("force-update", ["--config", "x"])],
    ["--version", ["--version"], ok("version")],
    ["-version", ["-version"], ok("version")],
    ["version", ["version"], ok("version")],
    ["demo --once", ["demo", "--once"], ok("demo", ["--once"])],
    ["demo --without-turnstile", ["demo", "--without-turnstile"], ok("demo", ["--without-turnstile"])],
    ["config", ["config"], ok("config")],
    ["a config file named like a command", ["--config", "config"], ok("run", ["--config", "config"])],
    ["-config demo --install-service", ["-config", "demo", "--install-service"], ok("install-service", ["--config", "demo"])],
    ["config --sample", ["config", "--sample"], ok("config", ["--sample"])],
  ] as const)("%s", (_name, argv, want) => {
    expect(normalizeArgv(argv)).toEqual(want);
  });
});

describe("--help anywhere, and help as a command", () => {
  test.each([
    [["--help"], "the program"],
    [["-h"], "the program"],
    [["-help"], "the program"],
    [["help"], "the program"],
    [["help", "--config", "x"], "the program"],
    [["--help", "--bogus"], "the program"],
    [["--config", "--help"], "the program"],
    [["run", "--help"], "run"],
    [["help", "run"], "run"],
    [["--install-service", "--help"], "install-service"],
    [["--help", "--install-service"], "install-service"],
    [["service", "install", "--help"], "install-service"],
    [["help", "install-service"], "install-service"],
    [["demo", "--help"], "demo"],
    [["help", "demo", "--once"], "demo"],
    [["config", "--help"], "config"],
    [["help", "config"], "config"],
  ] as const)("%j → help for %s, never a usage error", (argv, about) => {
    const n = normalizeArgv(argv);
    expect(n.help).toBe(true);
    expect(n.named ? n.command : "the program").toBe(about);
  });

  test("help for a command that does not exist is a usage error listing the commands", () => {
    expect(() => normalizeArgv(["help", "serve"])).toThrow(/no command "serve" \(commands: run, .*config, status, lease, release, help\)/);
  });
});

describe("usage errors", () => {
  test.each([
    ["unknown flag", ["--bogus"], /unknown flag "--bogus"/],
    ["unknown single-dash flag", ["-x"], /unknown flag "-x"/],
    ["stray word", ["serve"], /unexpected argument "serve"/],
    ["--no-copy on run", ["--no-copy"], /unknown flag "--no-copy" for "run"/],
    ["--once on run", ["--once"], /unknown flag "--once" for "run"/],
    ["--config on version", ["--version", "--config", "x"], /unknown flag "--config" for "version"/],
    ["--no-copy on remove", ["--remove-service", "--no-copy"], /unknown flag "--no-copy" for "remove-service"/],
    ["--config on demo", ["demo", "--config", "x"], /unknown flag "--config" for "demo"/],
    ["--config without value", ["--config"], /"--config" needs a value/],
    ["-config without value", ["-config"], /"--config" needs a value/],
    ["--config followed by a flag", ["--install-service", "--config", "--no-copy"], /"--config" needs a value/],
    ["two commands", ["--install-service", "--remove-service"], /cannot be combined/],
    ["flag command and subcommand", ["version", "--force-update"], /cannot be combined/],
    ["service without sub", ["service"], /"service" needs "install" or "remove"/],
    ["service with a wrong sub", ["service", "start"], /got "start"/],
    ["a second positional", ["version", "extra"], /unexpected argument "extra"/],
  ] as const)("%s", (_name, argv, message) => {
    let caught: unknown;
    try {
      normalizeArgv(argv);
    } catch (err) {
      caught = err;
    }
    expect(caught).toBeInstanceOf(UsageError);
    expect((caught as Error).message).toMatch(message);
  });

  test("an unknown flag lists the flags the command does accept", () => {
    expect(() => normalizeArgv(["--install-service", "--force"])).toThrow(/accepted: --config, --no-copy\)$/);
  });

  test("the flag the Windows UAC relaunch adds is accepted but never offered", () => {
    expect(normalizeArgv(["remove-service", "--elevated-log", "C:\\t.log"]).args).toEqual(["--elevated-log", "C:\\t.log"]);
    for (const argv of [["--install-service", "--force"], ["remove-service", "--force"], ["force-update", "--force"]]) {
      let message = "";
      try {
        normalizeArgv(argv);
      } catch (err) {
        message = (err as Error).message;
      }
      expect(message).toContain('unknown flag "--force"');
      expect(message).not.toContain("elevated");
    }
  });

  test("a mistake in a command's flags points at that command's help", () => {
    expect(() => normalizeArgv(["demo", "--config", "x"])).toThrow(expect.objectContaining({ command: "demo" }));
  });
});

describe("install-service --no-copy as citty really parses it (issue 21: it was ignored in every spelling)", () => {
  const parsed = async (argv: string[]) => {
    const { parseArgs } = await import("citty");
    const { installServiceArgs, noCopyFrom } = await import("../../src/cli/index.ts");
    const n = normalizeArgv(argv);
    expect(n.command).toBe("install-service");
    return noCopyFrom(parseArgs(n.args, installServiceArgs));
  };
  test.each([
    [["--install-service", "--no-copy"]],
    [["--install-service", "-no-copy"]],
    [["install-service", "--no-copy", "--config", "x.env"]],
    [["service", "install", "-no-copy", "-config", "x.env"]],
    [["--install-service", "--no-copy=true"]],
    [["-config", "x.env", "--install-service", "--no-copy"]],
  ])("%p is no-copy", async (argv) => {
    expect(await parsed(argv)).toBe(true);
  });
  test.each([[["--install-service"]], [["install-service", "--config", "x.env"]], [["--install-service", "--no-copy=false"]]])("%p copies", async (argv) => {
    expect(await parsed(argv)).toBe(false);
  });
  test("a switch given a value it cannot mean is refused", () => {
    expect(() => normalizeArgv(["--install-service", "--no-copy=maybe"])).toThrow(/"--no-copy" is a switch/);
  });
});

test("lease with its command but no -- says where the command goes", () => {
  expect(() => normalizeArgv(["lease", "sleep", "1"])).toThrow('put the command after "--", as in gpu-turnstile lease -- sleep 1');
});
