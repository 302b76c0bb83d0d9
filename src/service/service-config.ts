/**
 * Where the installed service reads its config, as install-service recorded it: the unit's
 * `EnvironmentFile=` on Linux (systemd reads it for the service, which never looks beside its
 * binary), the `--config` on the Windows service's command line, else the file beside its exe
 * (the service's own lookup). The CLI's `status`, `lease` and `release` use it, so the installed
 * binary talks to its service's port with its service's token. Pure parsing, plus one reader that
 * takes the unit text or `sc qc` output from the caller.
 */
import { readFileSync } from "node:fs";
import { CONFIG_FILE_NAME } from "../config/load.ts";
import { LINUX_LAYOUT } from "./linux-install.ts";
import { execPathOf, parseUnit, unitValue } from "./systemd-unit.ts";
import { parseQc, SERVICE_NAME } from "./windows-sc.ts";

export interface InstalledService {
  /** the binary the service manager starts */
  exe: string;
  /** the config file that binary's service reads */
  config: string;
  /** how the config was recorded, for the line that says which file was read */
  recordedIn: string;
}

/** From the installed unit's text; null when it names no binary. */
export function fromSystemdUnit(unitText: string, unitPath: string): InstalledService | null {
  const entries = parseUnit(unitText);
  const exe = execPathOf(entries);
  if (!exe) return null;
  // `-` makes a missing file acceptable to systemd; `%%` is a literal `%`.
  const file = unitValue(entries, "Service", "EnvironmentFile")?.replace(/^-/, "").replace(/%%/g, "%");
  if (!file) return null;
  return { exe, config: file, recordedIn: `EnvironmentFile= in ${unitPath}` };
}

/** From `sc qc gpu-turnstile`'s output; null when it shows no command line. */
export function fromScQc(qcText: string): InstalledService | null {
  const args = splitWindowsCommandLine(parseQc(qcText).binPath);
  const exe = args[0];
  if (!exe) return null;
  const at = args.findIndex((a) => a === "--config" || a === "-config");
  if (at > 0 && args[at + 1]) return { exe, config: args[at + 1]!, recordedIn: "--config on the Windows service's command line" };
  return { exe, config: `${exe.slice(0, exe.lastIndexOf("\\") + 1)}${CONFIG_FILE_NAME}`, recordedIn: "beside the Windows service's exe" };
}

/** CommandLineToArgvW's rules (the inverse of quoteWindowsArg). */
export function splitWindowsCommandLine(line: string): string[] {
  const args: string[] = [];
  let cur = "";
  let quoted = false;
  let started = false;
  for (let i = 0; i < line.length; i++) {
    const c = line[i]!;
    if (c === "\\") {
      let n = 0;
      while (line[i] === "\\") (n++, i++);
      if (line[i] === '"') {
        cur += "\\".repeat(n >> 1);
        if (n % 2 === 1) cur += '"';
        else quoted = !quoted;
      } else {
        cur += "\\".repeat(n);
        i--;
      }
      started = true;
    } else if (c === '"') {
      quoted = !quoted;
      started = true;
    } else if (!quoted && (c === " " || c === "\t")) {
      if (started) args.push(cur);
      cur = "";
      started = false;
    } else {
      cur += c;
      started = true;
    }
  }
  if (started) args.push(cur);
  return args;
}

/**
 * The installed service on this machine, read the way install-service left it: the unit file on
 * Linux (world-readable), `sc qc` on Windows. Null when none is installed or it cannot be read.
 */
export function readInstalledService(os: "linux" | "win32" = process.platform === "win32" ? "win32" : "linux", unitPath: string = LINUX_LAYOUT.unitPath): InstalledService | null {
  try {
    if (os === "linux") return fromSystemdUnit(readFileSync(unitPath, "utf8"), unitPath);
    const qc = Bun.spawnSync(["sc.exe", "qc", SERVICE_NAME], { stdout: "pipe", stderr: "ignore" });
    return qc.exitCode === 0 ? fromScQc(qc.stdout.toString()) : null;
  } catch {
    return null;
  }
}
