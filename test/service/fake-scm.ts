/**
 * A pretend Windows service manager behind a FakePlatform: answers sc.exe and icacls.exe the way
 * Windows does (same output layout, same exit codes), keeps the service's state, and can be told
 * to fail. The installer under test only ever sees text, as on a real machine.
 */
import type { RunResult } from "../../src/service/platform.ts";
import { FakePlatform } from "../../src/service/platform-fake.ts";

export interface FakeService {
  binPath: string;
  startType: number;
  account: string;
  displayName: string;
  description: string;
  state: number;
  resetSeconds: number;
  failureActions: string;
  failureFlag: boolean;
  sidType: string;
  /** exit code reported after a failed start */
  exitCode: number;
}

const STATE_NAMES: Record<number, string> = { 1: "STOPPED", 2: "START_PENDING", 3: "STOP_PENDING", 4: "RUNNING" };

export class FakeScm {
  service: FakeService | undefined;
  /** icacls fails for this path */
  failGrantOn: string | undefined;
  /** the next start ends STOPPED with this exit code instead of RUNNING */
  failStartWith: number | undefined;
  /** queries that still report the pending state before it settles */
  pendingQueries = 1;
  private pendingLeft = 0;
  private pendingTarget = 0;

  constructor(readonly p: FakePlatform) {
    p.script = (cmd, args) => {
      if (cmd === "sc.exe") return this.sc(args);
      if (cmd === "icacls.exe") return this.icacls(args);
      if (cmd === "reg.exe") return this.reg(args);
      return { code: 127, stdout: "", stderr: `${cmd}: not found` };
    };
  }

  /** sc.exe and icacls.exe lines, without the query calls that only poll. */
  actions(): string[] {
    return this.p
      .commandLines()
      .filter((l) => !/^sc\.exe (query|qc|qfailure|qfailureflag|qsidtype) /.test(l) && !/^reg\.exe query /.test(l));
  }

  private sc(args: readonly string[]): RunResult {
    const [verb, name, ...rest] = args;
    const opts = pairs(rest);
    const s = this.service;
    const missing = (): RunResult => ({
      code: 1060,
      stdout: `[SC] OpenService FAILED 1060:\r\n\r\nThe specified service does not exist as an installed service.\r\n\r\n`,
      stderr: "",
    });
    const ok = (what: string): RunResult => ({ code: 0, stdout: `[SC] ${what} SUCCESS\r\n`, stderr: "" });
    switch (verb) {
      case "create":
        if (s) return { code: 1073, stdout: "[SC] CreateService FAILED 1073:\r\n\r\nThe specified service already exists.\r\n", stderr: "" };
        this.service = {
          binPath: opts["binPath="] ?? "",
          startType: opts["start="] === "auto" ? 2 : 3,
          account: opts["obj="] ?? "LocalSystem",
          displayName: opts["DisplayName="] ?? name!,
          description: "",
          state: 1,
          resetSeconds: 0,
          failureActions: "",
          failureFlag: false,
          sidType: "NONE",
          exitCode: 0,
        };
        return ok("CreateService");
    }
    if (!s) return missing();
    switch (verb) {
      case "query":
        this.settle();
        return { code: 0, stdout: queryText(name!, s), stderr: "" };
      case "qc":
        return { code: 0, stdout: qcText(name!, s), stderr: "" };
      case "qfailure":
        return { code: 0, stdout: qfailureText(name!, s), stderr: "" };
      case "qfailureflag":
        return {
          code: 0,
          stdout: `[SC] QueryServiceConfig2 SUCCESS\r\n\r\nSERVICE_NAME: ${name}\r\n        FAILURE_ACTIONS_ON_NONCRASH_FAILURES: ${s.failureFlag ? "TRUE" : "FALSE"}\r\n`,
          stderr: "",
        };
      case "qsidtype":
        return { code: 0, stdout: `[SC] QueryServiceConfig2 SUCCESS\r\n\r\nSERVICE_NAME: ${name}\r\nSERVICE_SID_TYPE:  ${s.sidType}\r\n`, stderr: "" };
      case "config":
        if (opts["binPath="] !== undefined) s.binPath = opts["binPath="];
        if (opts["start="] !== undefined) s.startType = opts["start="] === "auto" ? 2 : 3;
        if (opts["obj="] !== undefined) s.account = opts["obj="];
        if (opts["DisplayName="] !== undefined) s.displayName = opts["DisplayName="];
        return ok("ChangeServiceConfig");
      case "description":
        s.description = rest[0] ?? "";
        return ok("ChangeServiceConfig2");
      case "failure":
        s.resetSeconds = Number(opts["reset="]);
        s.failureActions = opts["actions="] ?? "";
        return ok("ChangeServiceConfig2");
      case "failureflag":
        s.failureFlag = rest[0] === "1";
        return ok("ChangeServiceConfig2");
      case "sidtype":
        s.sidType = (rest[0] ?? "").toUpperCase();
        return ok("ChangeServiceConfig2");
      case "start":
        if (s.state !== 1) return { code: 1056, stdout: "[SC] StartService FAILED 1056:\r\n\r\nAn instance of the service is already running.\r\n", stderr: "" };
        this.pend(2, this.failStartWith === undefined ? 4 : 1);
        if (this.failStartWith !== undefined) s.exitCode = this.failStartWith;
        this.failStartWith = undefined;
        return { code: 0, stdout: queryText(name!, s), stderr: "" };
      case "stop":
        if (s.state === 1) return { code: 1062, stdout: "[SC] ControlService FAILED 1062:\r\n\r\nThe service has not been started.\r\n", stderr: "" };
        this.pend(3, 1);
        return { code: 0, stdout: queryText(name!, s), stderr: "" };
      case "delete":
        this.service = undefined;
        return ok("DeleteService");
      default:
        return { code: 1, stdout: `unknown verb ${verb}`, stderr: "" };
    }
  }

  private pend(pending: number, target: number): void {
    this.service!.state = pending;
    this.pendingLeft = this.pendingQueries;
    this.pendingTarget = target;
  }

  /** A pending state lasts a few queries, then settles — so the installer must poll. */
  private settle(): void {
    const s = this.service!;
    if (s.state !== 2 && s.state !== 3) return;
    if (this.pendingLeft-- > 0) return;
    s.state = this.pendingTarget;
  }

  /** The service key's Environment value (REG_MULTI_SZ), as reg.exe add / query see it. */
  environment: string | undefined;

  private reg(args: readonly string[]): RunResult {
    const [verb] = args;
    if (!this.service) return { code: 1, stdout: "", stderr: "ERROR: The system was unable to find the specified registry key or value.\r\n" };
    if (verb === "add") {
      this.environment = args[args.indexOf("/d") + 1];
      return { code: 0, stdout: "The operation completed successfully.\r\n", stderr: "" };
    }
    if (verb === "query" && this.environment !== undefined) {
      return { code: 0, stdout: `\r\nHKEY_LOCAL_MACHINE\\SYSTEM\\CurrentControlSet\\Services\\gpu-turnstile\r\n    Environment    REG_MULTI_SZ    ${this.environment}\r\n`, stderr: "" };
    }
    return { code: 1, stdout: "", stderr: "ERROR: The system was unable to find the specified registry key or value.\r\n" };
  }

  /** Explicit ACL entries per path (lower-cased), and whether the folder's entries still apply. */
  private readonly acls = new Map<string, { inherit: boolean; grants: Map<string, string> }>();

  /**
   * Who may access `path`: its explicit entries plus, unless inheritance was removed, what
   * %ProgramFiles% passes down to every file in it (Users may read).
   */
  principals(path: string): string[] {
    const acl = this.acls.get(path.toLowerCase()) ?? { inherit: true, grants: new Map() };
    const all = new Set([...(acl.inherit ? INHERITED : []), ...acl.grants.keys()]);
    return [...all].sort();
  }

  private icacls(args: readonly string[]): RunResult {
    const [path, ...rest] = args;
    if (this.failGrantOn !== undefined && path === this.failGrantOn) {
      return { code: 1332, stdout: "", stderr: `${path}: No mapping between account names and security IDs was done.\r\nSuccessfully processed 0 files; Failed processing 1 files\r\n` };
    }
    const key = path!.toLowerCase();
    const acl = this.acls.get(key) ?? { inherit: true, grants: new Map<string, string>() };
    let granting = false;
    for (const a of rest) {
      if (a === "/inheritance:r") acl.inherit = false;
      else if (a === "/grant" || a === "/grant:r") granting = true;
      else if (a.startsWith("/")) return { code: 87, stdout: "", stderr: `Invalid parameter "${a}"\r\n` };
      else if (granting) {
        const at = a.indexOf(":(");
        if (at < 0) return { code: 87, stdout: "", stderr: `Invalid parameter "${a}"\r\n` };
        const who = a.slice(0, at);
        acl.grants.set(WELL_KNOWN[who] ?? who, a.slice(at + 1));
      }
    }
    this.acls.set(key, acl);
    return { code: 0, stdout: `processed file: ${path}\r\nSuccessfully processed 1 files; Failed processing 0 files\r\n`, stderr: "" };
  }
}

const INHERITED = ["BUILTIN\\Administrators", "BUILTIN\\Users", "NT AUTHORITY\\SYSTEM", "NT SERVICE\\TrustedInstaller"];
const WELL_KNOWN: Record<string, string> = { "*S-1-5-18": "NT AUTHORITY\\SYSTEM", "*S-1-5-32-544": "BUILTIN\\Administrators" };

function pairs(rest: readonly string[]): Record<string, string> {
  const out: Record<string, string> = {};
  for (let i = 0; i + 1 < rest.length; i += 2) out[rest[i]!] = rest[i + 1]!;
  return out;
}

function queryText(name: string, s: FakeService): string {
  const failed = s.exitCode !== 0;
  return [
    "",
    `SERVICE_NAME: ${name} `,
    "        TYPE               : 10  WIN32_OWN_PROCESS  ",
    `        STATE              : ${s.state}  ${STATE_NAMES[s.state]} `,
    "                                (STOPPABLE, NOT_PAUSABLE, ACCEPTS_SHUTDOWN)",
    `        WIN32_EXIT_CODE    : ${failed ? 1066 : 0}  (0x${(failed ? 1066 : 0).toString(16)})`,
    `        SERVICE_EXIT_CODE  : ${s.exitCode}  (0x${s.exitCode.toString(16)})`,
    "        CHECKPOINT         : 0x0",
    "        WAIT_HINT          : 0x0",
    "",
  ].join("\r\n");
}

function qcText(name: string, s: FakeService): string {
  return [
    "[SC] QueryServiceConfig SUCCESS",
    "",
    `SERVICE_NAME: ${name}`,
    "        TYPE               : 10  WIN32_OWN_PROCESS ",
    `        START_TYPE         : ${s.startType}   ${s.startType === 2 ? "AUTO_START" : "DEMAND_START"}`,
    "        ERROR_CONTROL      : 1   NORMAL",
    `        BINARY_PATH_NAME   : ${s.binPath}`,
    "        LOAD_ORDER_GROUP   : ",
    "        TAG                : 0",
    `        DISPLAY_NAME       : ${s.displayName}`,
    "        DEPENDENCIES       : ",
    `        SERVICE_START_NAME : ${s.account}`,
    "",
  ].join("\r\n");
}

function qfailureText(name: string, s: FakeService): string {
  const actions = s.failureActions
    .split("/")
    .reduce<string[]>((acc, v, i, all) => (i % 2 === 0 && v ? [...acc, `${v.toUpperCase()} -- Delay = ${all[i + 1]} milliseconds.`] : acc), []);
  return [
    "[SC] QueryServiceConfig2 SUCCESS",
    "",
    `SERVICE_NAME: ${name}`,
    `        RESET_PERIOD (in seconds)    : ${s.resetSeconds}`,
    "        REBOOT_MESSAGE               : ",
    "        COMMAND_LINE                 : ",
    `        FAILURE_ACTIONS              : ${actions[0] ?? ""}`,
    ...actions.slice(1).map((a) => `                                       ${a}`),
    "",
  ].join("\r\n");
}
