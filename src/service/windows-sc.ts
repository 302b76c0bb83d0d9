/**
 * sc.exe's output, read, and the service configuration we want, compared. Pure text in, data out.
 *
 * sc.exe's field labels (SERVICE_NAME, STATE, BINARY_PATH_NAME, ...) and numeric codes are the
 * same on every Windows language; only the words after the numbers may be translated, so the
 * numbers are what we read.
 */

export const SERVICE_NAME = "gpu-turnstile";
export const VIRTUAL_ACCOUNT = `NT SERVICE\\${SERVICE_NAME}`;
export const DISPLAY_NAME = "gpu-turnstile";
export const DESCRIPTION = "One GPU shared by Ollama and ComfyUI: holds LLM requests while an image job runs.";
/** restart 5 s after each failure; the failure count resets after a day without one */
export const FAILURE_RESET_S = 86_400;
export const FAILURE_ACTIONS = "restart/5000/restart/5000/restart/5000";

/** sc.exe's exit code when the service does not exist */
export const ERROR_SERVICE_DOES_NOT_EXIST = 1060;

export const STATE = { STOPPED: 1, START_PENDING: 2, STOP_PENDING: 3, RUNNING: 4 } as const;

/** `KEY : value` lines of any sc.exe query, continuation lines appended to the previous key. */
export function parseScFields(text: string): Map<string, string[]> {
  const fields = new Map<string, string[]>();
  let last: string[] | undefined;
  for (const line of text.split(/\r?\n/)) {
    const m = /^\s*([A-Z][A-Z0-9_]*(?: \([^)]*\))?)\s*:\s?(.*)$/.exec(line);
    if (m) {
      last = [m[2]!.trim()];
      fields.set(m[1]!.replace(/ \(.*\)$/, ""), last);
    } else if (last && line.trim() !== "") {
      last.push(line.trim());
    }
  }
  return fields;
}

/** STATE from `sc query`, as a number (1..7), or undefined when missing. */
export function parseState(text: string): number | undefined {
  const v = parseScFields(text).get("STATE")?.[0];
  const n = v === undefined ? NaN : Number.parseInt(v, 10);
  return Number.isNaN(n) ? undefined : n;
}

/** `sc query`'s exit codes after a failed start, to tell the user why. */
export function parseExitCodes(text: string): { win32: number; service: number } {
  const f = parseScFields(text);
  const num = (k: string) => Number.parseInt(f.get(k)?.[0] ?? "0", 10) || 0;
  return { win32: num("WIN32_EXIT_CODE"), service: num("SERVICE_EXIT_CODE") };
}

/** The settings of `sc qc` (plus qfailure / qfailureflag / qsidtype) that we manage. */
export interface ServiceConfig {
  binPath: string;
  /** 2 = auto, 3 = demand, 4 = disabled; delayed auto is 2 with `delayed` */
  startType: number;
  delayed: boolean;
  account: string;
  displayName: string;
}

export function parseQc(text: string): ServiceConfig {
  const f = parseScFields(text);
  const start = f.get("START_TYPE")?.[0] ?? "";
  return {
    binPath: f.get("BINARY_PATH_NAME")?.[0] ?? "",
    startType: Number.parseInt(start, 10),
    delayed: /DELAYED/i.test(start),
    account: f.get("SERVICE_START_NAME")?.[0] ?? "",
    displayName: f.get("DISPLAY_NAME")?.[0] ?? "",
  };
}

export interface FailureConfig {
  resetSeconds: number;
  /** delays in ms of the RESTART actions, in order; another action type makes it "" */
  restartDelays: number[];
  otherActions: boolean;
}

export function parseQfailure(text: string): FailureConfig {
  const f = parseScFields(text);
  const actions = f.get("FAILURE_ACTIONS") ?? [];
  const restartDelays: number[] = [];
  let otherActions = false;
  for (const a of actions) {
    if (a === "") continue;
    const m = /^RESTART\s*--\s*Delay\s*=\s*(\d+)/i.exec(a);
    if (m) restartDelays.push(Number(m[1]));
    else otherActions = true;
  }
  return { resetSeconds: Number.parseInt(f.get("RESET_PERIOD")?.[0] ?? "", 10), restartDelays, otherActions };
}

export function parseFailureFlag(text: string): boolean {
  return /TRUE/i.test(parseScFields(text).get("FAILURE_ACTIONS_ON_NONCRASH_FAILURES")?.[0] ?? "");
}

export function parseSidType(text: string): string {
  return (parseScFields(text).get("SERVICE_SID_TYPE")?.[0] ?? "").toUpperCase();
}

/** Windows' rules for one argument in a command line (CommandLineToArgvW / the MSVC runtime). */
export function quoteWindowsArg(arg: string): string {
  if (arg !== "" && !/[\s"]/.test(arg)) return arg;
  let out = '"';
  let backslashes = 0;
  for (const c of arg) {
    if (c === "\\") {
      backslashes++;
      continue;
    }
    // Backslashes before a quote are doubled, and the quote escaped.
    if (c === '"') out += "\\".repeat(backslashes * 2 + 1) + c;
    else out += "\\".repeat(backslashes) + c;
    backslashes = 0;
  }
  return `${out}${"\\".repeat(backslashes * 2)}"`;
}

export function windowsCommandLine(args: readonly string[]): string {
  return args.map(quoteWindowsArg).join(" ");
}

/** The service's command line: the exe, quoted, and the flag that makes it speak to the SCM. */
export function serviceBinPath(exe: string, serviceFlag: string, configPath?: string): string {
  return windowsCommandLine([exe, serviceFlag, ...(configPath ? ["--config", configPath] : [])]);
}

/** What differs, as `sc config` arguments (name= value pairs), plus a human line per setting. */
export function configDrift(have: ServiceConfig, want: ServiceConfig): { args: string[]; lines: string[] } {
  const args: string[] = [];
  const lines: string[] = [];
  // sc prints the command line as stored; compare case-insensitively (paths are) and by content.
  if (have.binPath.toLowerCase() !== want.binPath.toLowerCase()) {
    args.push("binPath=", want.binPath);
    lines.push(`command line: ${have.binPath} → ${want.binPath}`);
  }
  if (have.startType !== want.startType || have.delayed !== want.delayed) {
    args.push("start=", want.delayed ? "delayed-auto" : startName(want.startType));
    lines.push(`start type: ${have.startType}${have.delayed ? " (delayed)" : ""} → ${want.startType}`);
  }
  if (have.account.toLowerCase() !== want.account.toLowerCase()) {
    args.push("obj=", want.account);
    lines.push(`account: ${have.account} → ${want.account}`);
  }
  if (have.displayName !== want.displayName) {
    args.push("DisplayName=", want.displayName);
    lines.push(`display name: ${have.displayName} → ${want.displayName}`);
  }
  return { args, lines };
}

function startName(t: number): string {
  return t === 2 ? "auto" : t === 3 ? "demand" : t === 4 ? "disabled" : String(t);
}
