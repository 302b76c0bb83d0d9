/**
 * Windows UAC: a non-elevated install/remove relaunches itself elevated, waits, and mirrors the
 * child's exit code. Done with PowerShell's `Start-Process -Verb RunAs` rather than
 * ShellExecuteExW over FFI: the same ShellExecute underneath, but it is one command behind the
 * Platform interface (so the recorder tests it on Linux) instead of a struct layout that could
 * only be checked on Windows.
 *
 * The elevated child gets its own (hidden) console, which the user never sees, so it writes its
 * report lines to a temporary file named by ELEVATED_LOG_FLAG; the parent prints them afterwards.
 */
import type { Platform } from "./platform.ts";
import { Report, type Outcome, type ReportLine, type ReportSink } from "./report.ts";
import { windowsCommandLine } from "./windows-sc.ts";

/** Hidden CLI flag: `--elevated-log <file>` = also write report lines (JSON, one per line) there. */
export const ELEVATED_LOG_FLAG = "--elevated-log";

/** PowerShell's exit code when the user said no at the UAC prompt (ERROR_CANCELLED). */
export const ERROR_CANCELLED = 1223;

function psQuote(s: string): string {
  return `'${s.replace(/'/g, "''")}'`;
}

/** The PowerShell that starts `exe args…` elevated and exits with its exit code. */
export function elevationScript(exe: string, args: readonly string[]): string {
  // Reading .Handle before waiting makes ExitCode available afterwards (Windows PowerShell 5.1).
  return [
    "$ErrorActionPreference = 'Stop'",
    "try {",
    `  $p = Start-Process -FilePath ${psQuote(exe)} -ArgumentList ${psQuote(windowsCommandLine(args))} -Verb RunAs -WindowStyle Hidden -PassThru`,
    "  $null = $p.Handle",
    "  $p.WaitForExit()",
    "  exit $p.ExitCode",
    "} catch {",
    "  [Console]::Error.WriteLine($_.Exception.Message)",
    `  exit ${ERROR_CANCELLED}`,
    "}",
  ].join("\n");
}

/** -EncodedCommand takes base64 of UTF-16LE: no quoting rules of cmd or PowerShell to get wrong. */
export function encodePowerShell(script: string): string {
  return Buffer.from(script, "utf16le").toString("base64");
}

export interface RelaunchOptions {
  /** the running exe */
  exe: string;
  /** the user's arguments that led here (install-service …), passed on unchanged */
  args: readonly string[];
  onLine?: ReportSink;
}

export async function relaunchElevated(p: Platform, o: RelaunchOptions): Promise<Outcome> {
  const r = new Report(o.onLine);
  const temp = p.env.TEMP || p.env.TMP || "C:\\Windows\\Temp";
  const log = `${temp}\\gpu-turnstile-elevated-${p.pid}.log`;
  r.info("administrator rights are needed: asking Windows (UAC)...");
  const res = await p.run("powershell.exe", [
    "-NoProfile",
    "-NonInteractive",
    "-ExecutionPolicy",
    "Bypass",
    "-EncodedCommand",
    encodePowerShell(elevationScript(o.exe, [...o.args, ELEVATED_LOG_FLAG, log])),
  ]);
  const text = await p.readText(log);
  if (text !== null) {
    for (const line of parseElevatedLog(text)) {
      if (line.level === "error") r.error(line.text);
      else if (line.level === "warn") r.warn(line.text);
      else r.info(line.text);
    }
    await p.unlink(log);
  }
  if (res.code === ERROR_CANCELLED && text === null) {
    r.error(`not elevated: ${(res.stderr.trim() || "the UAC prompt was declined")} (nothing was changed)`);
    return r.done();
  }
  if (res.code !== 0 && r.ok) r.error(`the elevated ${o.args[0] ?? "command"} failed (exit ${res.code})${res.stderr.trim() ? `: ${res.stderr.trim()}` : ""}`);
  // Mirror the child's exit code exactly, not just 0/1.
  return { exitCode: res.code === 0 ? (r.ok ? 0 : 1) : res.code, lines: r.lines };
}

/** One JSON ReportLine per line, as the elevated child appends them. */
export function formatElevatedLine(line: ReportLine): string {
  return `${JSON.stringify(line)}\n`;
}

export function parseElevatedLog(text: string): ReportLine[] {
  const out: ReportLine[] = [];
  for (const raw of text.split(/\r?\n/)) {
    if (raw.trim() === "") continue;
    try {
      const v = JSON.parse(raw) as ReportLine;
      if ((v.level === "info" || v.level === "warn" || v.level === "error") && typeof v.text === "string") out.push(v);
    } catch {
      out.push({ level: "info", text: raw });
    }
  }
  return out;
}
