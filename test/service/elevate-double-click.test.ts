import { describe, expect, test } from "bun:test";
import { explorerStart, planExplorerStart } from "../../src/service/double-click.ts";
import {
  elevationScript,
  ELEVATED_LOG_FLAG,
  encodePowerShell,
  ERROR_CANCELLED,
  formatElevatedLine,
  parseElevatedLog,
  relaunchElevated,
} from "../../src/service/elevate.ts";
import { FakePlatform } from "../../src/service/platform-fake.ts";
import { formatLines } from "../../src/service/report.ts";
import { quoteWindowsArg, windowsCommandLine } from "../../src/service/windows-sc.ts";
import { sampleText } from "./stand-ins.ts";

const EXE = "C:\\Users\\bob\\Downloads\\gpu-turnstile.exe";
const TEMP = "C:\\Users\\bob\\AppData\\Local\\Temp";
const LOG = `${TEMP}\\gpu-turnstile-elevated-4242.log`;

function decode(b64: string): string {
  return Buffer.from(b64, "base64").toString("utf16le");
}

describe("relaunchElevated", () => {
  test("runs PowerShell Start-Process -Verb RunAs with the same arguments plus the log flag", async () => {
    const p = new FakePlatform({ os: "win32", env: { TEMP } }).seedDir(TEMP);
    p.script = (cmd, args, fake) => {
      const script = decode(args.at(-1)!);
      expect(script).toContain("-Verb RunAs");
      expect(script).toContain(`-FilePath '${EXE}'`);
      expect(script).toContain(`-ArgumentList 'install-service -config "D:\\my cfg\\gt.env" ${ELEVATED_LOG_FLAG} ${LOG}'`);
      // the child's report, as it would append it
      fake.seed(LOG, formatElevatedLine({ level: "info", text: "started gpu-turnstile" }) + formatElevatedLine({ level: "warn", text: "careful" }));
      return { code: 0, stdout: "", stderr: "" };
    };
    const out = await relaunchElevated(p, { exe: EXE, args: ["install-service", "-config", "D:\\my cfg\\gt.env"] });
    expect(p.calls[0]!.cmd).toBe("powershell.exe");
    expect(p.calls[0]!.args.slice(0, 5)).toEqual(["-NoProfile", "-NonInteractive", "-ExecutionPolicy", "Bypass", "-EncodedCommand"]);
    expect(out.exitCode).toBe(0);
    expect(formatLines(out.lines)).toContain("started gpu-turnstile\nwarning: careful");
    expect(p.exists(LOG)).toBe(false); // cleaned up
  });

  test("the child's exit code is mirrored", async () => {
    const p = new FakePlatform({ os: "win32", env: { TEMP } }).seedDir(TEMP);
    p.script = (_c, _a, fake) => {
      fake.seed(LOG, formatElevatedLine({ level: "error", text: "sc.exe create failed" }));
      return { code: 1, stdout: "", stderr: "" };
    };
    const out = await relaunchElevated(p, { exe: EXE, args: ["install-service"] });
    expect(out.exitCode).toBe(1);
    expect(formatLines(out.lines)).toContain("error: sc.exe create failed");
  });

  test("a declined UAC prompt is a clear error", async () => {
    const p = new FakePlatform({ os: "win32", env: { TEMP } });
    p.script = () => ({ code: ERROR_CANCELLED, stdout: "", stderr: "This command cannot be run due to the error: The operation was canceled by the user.\n" });
    const out = await relaunchElevated(p, { exe: EXE, args: ["remove-service"] });
    expect(out.exitCode).toBe(1);
    expect(formatLines(out.lines)).toContain("not elevated: This command cannot be run due to the error: The operation was canceled by the user. (nothing was changed)");
  });

  test("the script quotes single quotes for PowerShell and encodes as UTF-16LE base64", () => {
    const s = elevationScript("C:\\it's\\x.exe", ["a"]);
    expect(s).toContain("-FilePath 'C:\\it''s\\x.exe'");
    expect(decode(encodePowerShell(s))).toBe(s);
  });

  test("parseElevatedLog keeps lines it cannot parse as info", () => {
    expect(parseElevatedLog('{"level":"warn","text":"w"}\r\nplain\n')).toEqual([
      { level: "warn", text: "w" },
      { level: "info", text: "plain" },
    ]);
  });
});

describe("Windows command-line quoting (CommandLineToArgvW rules)", () => {
  test.each([
    ["plain", "plain"],
    ["with space", '"with space"'],
    ["", '""'],
    ['say "hi"', '"say \\"hi\\""'],
    ["C:\\dir with space\\", '"C:\\dir with space\\\\"'],
    ["C:\\no\\space\\", "C:\\no\\space\\"],
    ['a\\"b', '"a\\\\\\"b"'],
  ])("%p → %s", (arg, quoted) => {
    expect(quoteWindowsArg(arg)).toBe(quoted);
  });
  test("joins with spaces", () => {
    expect(windowsCommandLine(["C:\\Program Files\\x.exe", "--windows-service"])).toBe('"C:\\Program Files\\x.exe" --windows-service');
  });
});

describe("planExplorerStart", () => {
  const base = {
    configPath: "C:\\x\\gpu-turnstile.env",
    configExists: false,
    samplePath: "C:\\x\\gpu-turnstile.env",
    sampleExists: false,
  };

  test("from a shell (2+ processes on the console): nothing special", () => {
    const plan = planExplorerStart({ ...base, consoleProcessCount: 2, configProblem: "neither OLLAMA_URL nor COMFY_URL is set" });
    expect(plan).toEqual({ fromExplorer: false, lines: [], waitForKey: false, run: false });
  });

  test("from Explorer without a config: writes a sample, says what to set, waits for a key", () => {
    const plan = planExplorerStart({ ...base, consoleProcessCount: 1, configProblem: "neither OLLAMA_URL nor COMFY_URL is set" });
    expect(plan.writeSample).toBe("C:\\x\\gpu-turnstile.env");
    expect(plan.waitForKey).toBe(true);
    expect(plan.run).toBe(false);
    const text = plan.lines.join("\n");
    expect(text).toContain("cannot start: neither OLLAMA_URL nor COMFY_URL is set");
    expect(text).toContain("OLLAMA_URL=");
    expect(text).toContain("COMFY_URL=");
    expect(text).toContain("install-service");
    expect(plan.lines.at(-1)).toBe("Press any key to close this window.");
  });

  test("from Explorer with an invalid config: never overwrites it, points at it", () => {
    const plan = planExplorerStart({ ...base, consoleProcessCount: 1, configExists: true, sampleExists: true, configProblem: "C:\\x\\gpu-turnstile.env:3: LOG_LEVEL: must be one of ..." });
    expect(plan.writeSample).toBeUndefined();
    expect(plan.lines.join("\n")).toContain("Fix the config in C:\\x\\gpu-turnstile.env");
    expect(plan.waitForKey).toBe(true);
  });

  test("from Explorer with a valid config: runs, and says how to install the service", () => {
    const plan = planExplorerStart({ ...base, consoleProcessCount: 1, configExists: true, configProblem: null });
    expect(plan.run).toBe(true);
    expect(plan.waitForKey).toBe(false);
    expect(plan.lines.join("\n")).toContain("gpu-turnstile.exe install-service");
  });
});

describe("explorerStart", () => {
  test("writes the sample next to the exe, prints, waits for the key, says exit", async () => {
    const p = new FakePlatform({ os: "win32" }).seedDir("C:\\x");
    const printed: string[] = [];
    let waited = false;
    const result = await explorerStart({
      p,
      exePath: "C:\\x\\gpu-turnstile.exe",
      version: "v1.2.0",
      configProblem: "neither OLLAMA_URL nor COMFY_URL is set",
      configPath: "C:\\x\\gpu-turnstile.env",
      renderSample: sampleText,
      consoleProcessCount: () => 1,
      print: (l) => printed.push(l),
      waitForKey: async () => {
        waited = true;
      },
    });
    expect(result).toBe("exit");
    expect(waited).toBe(true);
    expect(p.file("C:\\x\\gpu-turnstile.env")).toStartWith("CFG_VER=v1.2.0\n");
    expect(printed.join("\n")).toContain("A sample config was written to C:\\x\\gpu-turnstile.env");
  });

  test("a sample that cannot be written is reported instead", async () => {
    const p = new FakePlatform({ os: "win32" }); // C:\x does not exist
    const printed: string[] = [];
    const result = await explorerStart({
      p,
      exePath: "C:\\x\\gpu-turnstile.exe",
      version: "v1.2.0",
      configProblem: "neither OLLAMA_URL nor COMFY_URL is set",
      configPath: "C:\\x\\gpu-turnstile.env",
      renderSample: sampleText,
      consoleProcessCount: () => 1,
      print: (l) => printed.push(l),
      waitForKey: async () => {},
    });
    expect(result).toBe("exit");
    expect(printed.join("\n")).toContain("Could not write a sample config to C:\\x\\gpu-turnstile.env");
  });

  test("from a shell: not-explorer, nothing printed or written", async () => {
    const p = new FakePlatform({ os: "win32" }).seedDir("C:\\x");
    const printed: string[] = [];
    const result = await explorerStart({
      p,
      exePath: "C:\\x\\gpu-turnstile.exe",
      version: "v1.2.0",
      configProblem: "bad",
      configPath: "C:\\x\\gpu-turnstile.env",
      renderSample: sampleText,
      consoleProcessCount: () => 3,
      print: (l) => printed.push(l),
      waitForKey: async () => {},
    });
    expect(result).toBe("not-explorer");
    expect(printed).toEqual([]);
    expect(p.changes).toEqual([]);
  });
});
