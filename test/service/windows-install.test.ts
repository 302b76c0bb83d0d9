/** The Windows installer's decisions, on Linux: a FakePlatform plus a pretend SCM record every command. */
import { describe, expect, test } from "bun:test";
import { FakePlatform } from "../../src/service/platform-fake.ts";
import { formatLines } from "../../src/service/report.ts";
import { exeOf, installWindows, removeWindows, windowsLayout } from "../../src/service/windows-install.ts";
import { DESCRIPTION } from "../../src/service/windows-sc.ts";
import { FakeScm } from "./fake-scm.ts";
import { standInConfig } from "./stand-ins.ts";

const ENV = { ProgramFiles: "C:\\Program Files", ProgramData: "C:\\ProgramData" };
const L = windowsLayout(ENV);
const SELF = "C:\\Users\\bob\\Downloads\\gpu-turnstile.exe";
const BESIDE = "C:\\Users\\bob\\Downloads\\gpu-turnstile.env";
const ACCOUNT = "NT SERVICE\\gpu-turnstile";
/** who may read the installed config: nobody else (it may hold credentials) */
const CONFIG_READERS = ["BUILTIN\\Administrators", "NT AUTHORITY\\SYSTEM", ACCOUNT].sort();
const BINPATH = '"C:\\Program Files\\gpu-turnstile\\gpu-turnstile.exe" --windows-service';

function machine(opts: { elevated?: boolean; config?: string | null } = {}) {
  const p = new FakePlatform({ os: "win32", env: { ...ENV }, elevated: opts.elevated ?? true });
  p.seed(SELF, "exe v1");
  if (opts.config !== null) p.seed(BESIDE, opts.config ?? "CFG_VER=v1.2.0\nOLLAMA_URL=http://127.0.0.1:11435\n");
  const scm = new FakeScm(p);
  return { p, scm };
}

const opts = { selfPath: SELF, noCopy: false, version: "v1.2.0", config: standInConfig };

/** install, then forget what was recorded so the next run's commands stand alone */
async function installed(m: ReturnType<typeof machine>) {
  const out = await installWindows(m.p, opts);
  expect(out.exitCode, formatLines(out.lines)).toBe(0);
  m.p.calls.length = 0;
  m.p.changes.length = 0;
}

describe("installWindows: first install", () => {
  test("copies exe and config, sets LOG_FILE, registers the virtual-account service, grants, starts", async () => {
    const { p, scm } = machine();
    const out = await installWindows(p, opts);
    expect(out.exitCode, formatLines(out.lines)).toBe(0);

    expect(p.file(L.exePath)).toBe("exe v1");
    expect(p.file(L.configPath)).toBe(
      "CFG_VER=v1.2.0\nOLLAMA_URL=http://127.0.0.1:11435\nLOG_FILE=C:\\ProgramData\\gpu-turnstile\\gpu-turnstile.log\n",
    );
    expect(p.exists(L.dataDir)).toBe(true);
    expect(scm.actions()).toEqual([
      `sc.exe create gpu-turnstile binPath= ${BINPATH} start= auto obj= ${ACCOUNT} DisplayName= gpu-turnstile`,
      `sc.exe description gpu-turnstile ${DESCRIPTION}`,
      "sc.exe failure gpu-turnstile reset= 86400 actions= restart/5000/restart/5000/restart/5000",
      "sc.exe failureflag gpu-turnstile 1",
      "sc.exe sidtype gpu-turnstile unrestricted",
      "reg.exe add HKLM\\SYSTEM\\CurrentControlSet\\Services\\gpu-turnstile /v Environment /t REG_MULTI_SZ /d BUN_CONFIG_MAX_HTTP_REQUESTS=65535 /f",
      `icacls.exe C:\\Program Files\\gpu-turnstile /grant ${ACCOUNT}:(OI)(CI)(M)`,
      `icacls.exe C:\\ProgramData\\gpu-turnstile /grant ${ACCOUNT}:(OI)(CI)(M)`,
      `icacls.exe ${L.configPath} /inheritance:r /grant:r *S-1-5-18:(F) *S-1-5-32-544:(F) ${ACCOUNT}:(R)`,
      "sc.exe start gpu-turnstile",
    ]);
    // The config may hold credentials: no longer readable by Users, as files in %ProgramFiles% are.
    expect(scm.principals(L.configPath)).toEqual(CONFIG_READERS);
    expect(scm.principals(L.exePath)).toContain("BUILTIN\\Users");
    // The exe is not on PATH: the way to remove it names its full path.
    expect(formatLines(out.lines)).toContain('remove with: "C:\\Program Files\\gpu-turnstile\\gpu-turnstile.exe" remove-service');
    // The registered command line is exactly one argument to sc.exe, quoted for the path's space.
    expect(p.calls[1]!.args[3]).toBe(BINPATH);
    expect(scm.service).toMatchObject({ state: 4, account: ACCOUNT, startType: 2, failureFlag: true, sidType: "UNRESTRICTED" });
    // The SCM's process cannot re-run itself to lift Bun's fetch limit: the service environment does.
    expect(scm.environment).toBe("BUN_CONFIG_MAX_HTTP_REQUESTS=65535");
    expect(p.slept).toBeGreaterThan(0); // it waited for RUNNING instead of trusting sc start
    expect(formatLines(out.lines)).toContain("logs: C:\\ProgramData\\gpu-turnstile\\gpu-turnstile.log");
  });

  test("no config anywhere: a sample with LOG_FILE for administrators only; nothing registered until it is set", async () => {
    const { p, scm } = machine({ config: null });
    const out = await installWindows(p, opts);
    expect(out.exitCode).toBe(1);
    expect(p.file(L.configPath)).toContain("LOG_FILE=C:\\ProgramData\\gpu-turnstile\\gpu-turnstile.log");
    expect(scm.service).toBeUndefined();
    expect(scm.principals(L.configPath)).toEqual(["BUILTIN\\Administrators", "NT AUTHORITY\\SYSTEM"]);
    expect(formatLines(out.lines)).toContain(`error: config: ${L.configPath} is a fresh sample: set OLLAMA_URL and/or COMFY_URL there`);
    expect(formatLines(out.lines)).toContain(`error: fix ${L.configPath}, then run install-service again (nothing was registered or started)`);

    p.seed(L.configPath, `${p.file(L.configPath)}OLLAMA_URL=http://127.0.0.1:11435\n`);
    const again = await installWindows(p, opts);
    expect(again.exitCode, formatLines(again.lines)).toBe(0);
    expect(scm.service?.state).toBe(4);
  });

  test("an installed config migrated but still unusable: written, the service keeps read access, nothing stopped", async () => {
    const m = machine();
    await installed(m);
    m.p.seed(L.configPath, "CFG_VER=v1.0.0\nJOB_TIMEOUT=5m\n");
    const out = await installWindows(m.p, opts);
    expect(out.exitCode).toBe(1);
    expect(m.p.file(L.configPath)).toStartWith("CFG_VER=v1.2.0\n");
    expect(m.p.file(`${L.configPath}.bak`)).toBe("CFG_VER=v1.0.0\nJOB_TIMEOUT=5m\n");
    expect(m.scm.principals(L.configPath)).toEqual(CONFIG_READERS);
    expect(m.scm.actions()).not.toContain("sc.exe stop gpu-turnstile");
    expect(m.scm.service?.state).toBe(4);
    expect(formatLines(out.lines)).toContain(`error: fix ${L.configPath}, then run install-service again`);
  });

  test("--config over an installed one: replaced, the old one kept as .bak, both for administrators (and the service) only", async () => {
    const m = machine();
    await installed(m);
    const given = "C:\\Users\\bob\\edited.env";
    m.p.seed(given, "OLLAMA_URL=http://admin:S3cretPW@127.0.0.1:11435\n");
    const before = m.p.file(L.configPath);
    const out = await installWindows(m.p, { ...opts, configPath: given });
    expect(out.exitCode, formatLines(out.lines)).toBe(0);
    expect(m.p.file(L.configPath)).toContain("OLLAMA_URL=http://admin:S3cretPW@127.0.0.1:11435\n");
    expect(m.p.file(`${L.configPath}.bak`)).toBe(before);
    expect(formatLines(out.lines)).toContain(`config: ${L.configPath} replaced by ${given} (they differed)`);
    expect(m.scm.principals(L.configPath)).toEqual(CONFIG_READERS);
    expect(m.scm.principals(`${L.configPath}.bak`)).toEqual(["BUILTIN\\Administrators", "NT AUTHORITY\\SYSTEM"]);
  });

  test("an existing LOG_FILE is kept, its folder created and granted", async () => {
    const { p, scm } = machine({ config: "CFG_VER=v1.2.0\nCOMFY_URL=http://127.0.0.1:8189\nLOG_FILE=D:\\logs\\gt.log\n" });
    const out = await installWindows(p, opts);
    expect(out.exitCode, formatLines(out.lines)).toBe(0);
    expect(p.file(L.configPath)).toBe("CFG_VER=v1.2.0\nCOMFY_URL=http://127.0.0.1:8189\nLOG_FILE=D:\\logs\\gt.log\n");
    expect(p.exists("D:\\logs")).toBe(true);
    expect(scm.actions()).toContain(`icacls.exe D:\\logs /grant ${ACCOUNT}:(OI)(CI)(M)`);
  });

  test("a grant that fails rolls the new registration back", async () => {
    const { p, scm } = machine();
    scm.failGrantOn = L.dataDir;
    const out = await installWindows(p, opts);
    expect(out.exitCode).toBe(1);
    expect(scm.service).toBeUndefined();
    expect(scm.actions().at(-1)).toBe("sc.exe delete gpu-turnstile");
    expect(formatLines(out.lines)).toContain("No mapping between account names and security IDs");
    expect(formatLines(out.lines)).toContain("rolled back");
  });

  test("a start that fails is reported with the exit code and where the log is", async () => {
    const { p, scm } = machine();
    scm.failStartWith = 1;
    const out = await installWindows(p, opts);
    expect(out.exitCode).toBe(1);
    expect(formatLines(out.lines)).toContain(
      "stopped right after starting (exit code 1) (see C:\\ProgramData\\gpu-turnstile\\gpu-turnstile.log)",
    );
  });

  test("not elevated: exit 1, nothing run, nothing written", async () => {
    const { p } = machine({ elevated: false });
    const out = await installWindows(p, opts);
    expect(out.exitCode).toBe(1);
    expect(formatLines(out.lines)).toContain("administrator");
    expect(p.calls).toEqual([]);
    expect(p.changes).toEqual([]);
    expect((await removeWindows(p)).exitCode).toBe(1);
    expect(p.calls).toEqual([]);
  });
});

describe("installWindows: converging on a second run", () => {
  test("nothing changed: stop, no copy, no reconfiguration, start again", async () => {
    const m = machine();
    await installed(m);
    const out = await installWindows(m.p, opts);
    expect(out.exitCode, formatLines(out.lines)).toBe(0);
    expect(m.p.changes.filter((c) => !c.startsWith("mkdir"))).toEqual([]);
    expect(m.scm.actions()).toEqual([
      "sc.exe stop gpu-turnstile",
      `icacls.exe C:\\Program Files\\gpu-turnstile /grant ${ACCOUNT}:(OI)(CI)(M)`,
      `icacls.exe C:\\ProgramData\\gpu-turnstile /grant ${ACCOUNT}:(OI)(CI)(M)`,
      `icacls.exe ${L.configPath} /inheritance:r /grant:r *S-1-5-18:(F) *S-1-5-32-544:(F) ${ACCOUNT}:(R)`,
      "sc.exe start gpu-turnstile",
    ]);
    expect(formatLines(out.lines)).toContain("registration is up to date");
  });

  test("stopped service and a new exe: exe replaced, left stopped", async () => {
    const m = machine();
    await installed(m);
    m.scm.service!.state = 1;
    m.p.seed(SELF, "exe v2");
    const out = await installWindows(m.p, opts);
    expect(out.exitCode, formatLines(out.lines)).toBe(0);
    expect(m.p.file(L.exePath)).toBe("exe v2");
    expect(m.scm.actions()).not.toContain("sc.exe stop gpu-turnstile");
    expect(m.scm.actions()).not.toContain("sc.exe start gpu-turnstile");
    expect(formatLines(out.lines)).toContain("left stopped");
  });

  test("drift: only what differs is changed (command line, failure flag)", async () => {
    const m = machine();
    await installed(m);
    m.scm.service!.binPath = '"C:\\Program Files\\gpu-turnstile\\gpu-turnstile.exe"';
    m.scm.service!.failureFlag = false;
    const out = await installWindows(m.p, opts);
    expect(out.exitCode, formatLines(out.lines)).toBe(0);
    const actions = m.scm.actions();
    expect(actions).toContain(`sc.exe config gpu-turnstile binPath= ${BINPATH}`);
    expect(actions).toContain("sc.exe failureflag gpu-turnstile 1");
    expect(actions.filter((a) => /sc\.exe (failure|sidtype|description) /.test(a))).toEqual([]);
    expect(m.scm.service).toMatchObject({ binPath: BINPATH, failureFlag: true, state: 4 });
  });

  test("a failed grant restores the previous registration and restarts the old service", async () => {
    const m = machine();
    await installed(m);
    const old = '"C:\\old\\gpu-turnstile.exe" --windows-service';
    m.scm.service!.binPath = old;
    m.scm.failGrantOn = L.installDir;
    const out = await installWindows(m.p, opts);
    expect(out.exitCode).toBe(1);
    expect(m.scm.service?.binPath).toBe(old);
    expect(m.scm.actions().slice(-2)).toEqual([`sc.exe config gpu-turnstile binPath= ${old}`, "sc.exe start gpu-turnstile"]);
    expect(formatLines(out.lines)).toContain("restored to its previous settings");
  });
});

describe("installWindows --no-copy", () => {
  test("registers the exe where it is, passes a config from elsewhere, grants read access only", async () => {
    const { p, scm } = machine();
    p.seed("D:\\cfg\\gt.env", "CFG_VER=v1.2.0\nCOMFY_URL=http://127.0.0.1:8189\n");
    const out = await installWindows(p, { ...opts, noCopy: true, configPath: "D:\\cfg\\gt.env" });
    expect(out.exitCode, formatLines(out.lines)).toBe(0);
    expect(p.exists(L.exePath)).toBe(false);
    expect(p.file("D:\\cfg\\gt.env")).toBe("CFG_VER=v1.2.0\nCOMFY_URL=http://127.0.0.1:8189\n");
    expect(scm.service?.binPath).toBe(`${SELF} --windows-service --config D:\\cfg\\gt.env`);
    expect(scm.actions()).toContain(`icacls.exe ${SELF} /grant ${ACCOUNT}:(RX)`);
    expect(scm.actions()).toContain(`icacls.exe D:\\cfg\\gt.env /grant ${ACCOUNT}:(R)`);
    expect(formatLines(out.lines)).toContain("sets no LOG_FILE");
  });
});

describe("removeWindows", () => {
  test("stops, deletes the service and the installed exe; config and logs stay", async () => {
    const m = machine();
    await installed(m);
    const out = await removeWindows(m.p);
    expect(out.exitCode, formatLines(out.lines)).toBe(0);
    expect(m.scm.actions()).toEqual(["sc.exe stop gpu-turnstile", "sc.exe delete gpu-turnstile"]);
    expect(m.scm.service).toBeUndefined();
    expect(m.p.exists(L.exePath)).toBe(false);
    expect(m.p.exists(L.configPath)).toBe(true);
    expect(formatLines(out.lines)).toContain("kept C:\\Program Files\\gpu-turnstile\\gpu-turnstile.env");
  });

  test("not installed: says so, exit 0", async () => {
    const { p } = machine();
    const out = await removeWindows(p);
    expect(out.exitCode).toBe(0);
    expect(formatLines(out.lines)).toContain("not installed");
  });

  test("the install folder goes once empty; a config kept in it keeps it", async () => {
    const m = machine();
    await installed(m);
    await m.p.unlink(L.configPath);
    const out = await removeWindows(m.p);
    expect(m.p.exists(L.installDir)).toBe(false);
    expect(formatLines(out.lines)).toContain("folder: removed C:\\Program Files\\gpu-turnstile");
    const kept = machine();
    await installed(kept);
    await removeWindows(kept.p);
    expect(kept.p.exists(L.installDir)).toBe(true);
  });

  test("a --no-copy registration leaves the user's exe alone", async () => {
    const m = machine();
    const out1 = await installWindows(m.p, { ...opts, noCopy: true });
    expect(out1.exitCode, formatLines(out1.lines)).toBe(0);
    await removeWindows(m.p);
    expect(m.p.exists(SELF)).toBe(true);
  });
});

test("exeOf reads quoted and bare command lines", () => {
  expect(exeOf(BINPATH)).toBe("C:\\Program Files\\gpu-turnstile\\gpu-turnstile.exe");
  expect(exeOf("C:\\x\\a.exe --windows-service")).toBe("C:\\x\\a.exe");
});
