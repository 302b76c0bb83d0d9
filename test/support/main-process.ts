/**
 * The real entry point as a child process (`bun src/main.ts`), for what only a process can show:
 * a `kill -9`, a SIGTERM, a restart. Configured by its environment alone, in an empty folder, so
 * nothing from the test runner's environment or a stray config file leaks in.
 */
import { join } from "node:path";

export const MAIN = join(import.meta.dir, "../../src/main.ts");

export interface MainProcess {
  readonly pid: number;
  /** The URL its `<name> listener ready` line announced. */
  url(name: string): string;
  /** Everything it wrote to stderr so far. */
  stderr(): string;
  /** Sends `signal` and resolves with the exit code (or the signal's name) once it is gone. */
  kill(signal: NodeJS.Signals): Promise<number | string>;
}

/** Only what a bare shell has (HOME is `cwd`), so nothing from the test runner's environment configures it. */
export function mainEnv(cwd: string, env: Record<string, string>): Record<string, string> {
  return { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: cwd, AUTO_UPDATE: "false", NO_COLOR: "1", ...env };
}

/** Starts it and resolves once every listener it was given an upstream for is ready. */
export async function startMain(cwd: string, env: Record<string, string>): Promise<MainProcess> {
  const p = Bun.spawn([process.execPath, MAIN], { cwd, env: mainEnv(cwd, env), stdout: "ignore", stderr: "pipe" });
  const want = ["OLLAMA_URL", "COMFY_URL"].filter((k) => env[k]).length;
  let text = "";
  const reader = p.stderr.getReader();
  const dec = new TextDecoder();
  const ready = () => listenersReady(text);
  while (ready().length < want) {
    const { done, value } = await reader.read();
    if (done) throw new Error(`exited before its listeners were ready:\n${text}`);
    text += dec.decode(value, { stream: true });
  }
  const urls = new Map(ready());
  const rest = (async () => {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) return;
      text += dec.decode(value, { stream: true });
    }
  })();
  return {
    pid: p.pid,
    url: (name) => urls.get(name) ?? "",
    stderr: () => text,
    async kill(signal) {
      if (p.exitCode === null && p.signalCode === null) p.kill(signal);
      const code = await p.exited;
      await rest;
      return p.signalCode ?? code;
    },
  };
}

/** `[name, url]` of each `<name> listener ready` line, in the text or the JSON log format. */
function listenersReady(text: string): [string, string][] {
  const found: [string, string][] = [];
  for (const line of text.split("\n")) {
    const m = /(\w+) listener ready url=(http:\/\/\S+)/.exec(line);
    if (m) found.push([m[1]!, m[2]!]);
    else if (line.startsWith("{") && line.includes("listener ready")) {
      const j = parseJson(line) as { msg?: string; url?: string } | undefined;
      const name = j?.msg && /^(\w+) listener ready$/.exec(j.msg)?.[1];
      if (name && j.url) found.push([name, j.url]);
    }
  }
  return found;
}

function parseJson(line: string): unknown {
  try {
    return JSON.parse(line);
  } catch {
    return undefined;
  }
}

/** The lines of `text` that are not JSON (LOG_FORMAT=json promises none). */
export function nonJsonLines(text: string): string[] {
  return text.split("\n").filter((l) => l.trim() !== "" && parseJson(l) === undefined);
}
