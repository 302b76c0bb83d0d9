/**
 * A Windows user who double-clicks gpu-turnstile.exe gets a console that closes the moment the
 * process exits. Without a config that would be a black flash and nothing else. So, when we were
 * started from Explorer (we are the only process on our console) and the config is missing or
 * invalid: write a commented sample next to the exe (if there is none), say what to set and
 * where, and wait for a key. With a valid config we run in that window and say how to install
 * the service instead.
 *
 * planExplorerStart is the decision (pure, tested); explorerStart does the I/O.
 */
import type { Platform } from "./platform.ts";
import type { SampleOptions } from "./install-config.ts";

export interface ExplorerStartInput {
  /** GetConsoleProcessList's count: 1 = a console of our own, from Explorer */
  consoleProcessCount: number;
  /** null = the config is valid; else the one-line problem (ConfigError message) */
  configProblem: string | null;
  /** where the config was looked for (beside the exe unless -config / GPU_TURNSTILE_CONFIG said otherwise) */
  configPath: string;
  /** whether that file exists */
  configExists: boolean;
  /** the file the sample would go to: gpu-turnstile.env beside the exe */
  samplePath: string;
  sampleExists: boolean;
}

export interface ExplorerPlan {
  fromExplorer: boolean;
  /** write a sample config here first */
  writeSample?: string;
  /** print these lines (to the console, not the log) */
  lines: string[];
  waitForKey: boolean;
  /** go on and run the turnstile; false = exit with code 1 after the key */
  run: boolean;
}

const SERVICE_HINT =
  "To run it as a Windows service that starts with Windows, open a command prompt here and run: gpu-turnstile.exe install-service (it asks for administrator rights).";

export function planExplorerStart(i: ExplorerStartInput): ExplorerPlan {
  if (i.consoleProcessCount !== 1) return { fromExplorer: false, lines: [], waitForKey: false, run: i.configProblem === null };
  if (i.configProblem === null) {
    return {
      fromExplorer: true,
      lines: ["gpu-turnstile is running in this window; closing the window stops it.", SERVICE_HINT],
      waitForKey: false,
      run: true,
    };
  }
  const lines = [`gpu-turnstile cannot start: ${i.configProblem}`, ""];
  let writeSample: string | undefined;
  if (!i.configExists && !i.sampleExists) {
    writeSample = i.samplePath;
    lines.push(`A sample config was written to ${i.samplePath}.`);
    lines.push("Open it in a text editor and set at least one of:");
  } else {
    lines.push(`Fix the config in ${i.configExists ? i.configPath : i.samplePath}. At least one of these must be set:`);
  }
  lines.push(
    "  OLLAMA_URL=http://127.0.0.1:11435   (where your Ollama listens)",
    "  COMFY_URL=http://127.0.0.1:8189     (where your ComfyUI listens)",
    "then start gpu-turnstile.exe again.",
    "",
    SERVICE_HINT,
    "",
    "Press any key to close this window.",
  );
  return { fromExplorer: true, ...(writeSample ? { writeSample } : {}), lines, waitForKey: true, run: false };
}

export interface ExplorerStartDeps {
  p: Platform;
  exePath: string;
  version: string;
  configProblem: string | null;
  /** where the config was looked for */
  configPath: string;
  renderSample(opts: SampleOptions): string;
  /** 1 from Explorer; windows-native's consoleProcessCount on Windows */
  consoleProcessCount(): number;
  print(line: string): void;
  waitForKey(): Promise<void>;
}

/**
 * Call it on Windows after loading (or failing to load) the config. "run": go on (a hint was
 * printed); "exit": the user was told what to do and pressed a key, exit with code 1;
 * "not-explorer": started from a shell, carry on as usual (print a config error the normal way).
 */
export async function explorerStart(d: ExplorerStartDeps): Promise<"run" | "exit" | "not-explorer"> {
  const samplePath = `${d.exePath.slice(0, Math.max(d.exePath.lastIndexOf("\\"), d.exePath.lastIndexOf("/")))}\\gpu-turnstile.env`;
  const plan = planExplorerStart({
    consoleProcessCount: d.consoleProcessCount(),
    configProblem: d.configProblem,
    configPath: d.configPath,
    configExists: (await d.p.stat(d.configPath)) !== null,
    samplePath,
    sampleExists: (await d.p.stat(samplePath)) !== null,
  });
  if (!plan.fromExplorer) return "not-explorer";
  let lines = plan.lines;
  if (plan.writeSample) {
    try {
      await d.p.writeText(plan.writeSample, d.renderSample({ version: d.version, platform: "win32" }));
    } catch (e) {
      const failed = `Could not write a sample config to ${plan.writeSample} (${(e as Error).message}); create it by hand.`;
      lines = lines.map((l) => (l.startsWith("A sample config was written") ? failed : l));
    }
  }
  for (const line of lines) d.print(line);
  if (plan.waitForKey) await d.waitForKey();
  return plan.run ? "run" : "exit";
}

/** Resolves on the next key press on an interactive stdin; at once when stdin is not a console. */
export function waitForKeyPress(stdin: NodeJS.ReadStream = process.stdin): Promise<void> {
  if (!stdin.isTTY) return Promise.resolve();
  return new Promise((resolve) => {
    stdin.setRawMode(true);
    stdin.resume();
    stdin.once("data", () => {
      stdin.setRawMode(false);
      stdin.pause();
      resolve();
    });
  });
}
