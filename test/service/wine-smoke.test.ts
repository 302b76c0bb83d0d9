/**
 * The Windows service protocol for real, under wine: a small exe built from src/service
 * (fixtures/wine-service-entry.ts) is registered with `sc create`, started, asked for /healthz,
 * stopped, and its exit codes read back from the SCM. This is the only test that runs
 * windows-scm.ts's FFI (StartServiceCtrlDispatcherW on a native thread, thread-safe callbacks).
 *
 * Opt-in (it takes ~15-20 s and a wine prefix of ~700 MB): GT_WINE_SMOKE=1, with Debian's
 * `wine64` and `gcc-mingw-w64-x86-64-win32` installed, and Bun's Windows runtime reachable for
 * `bun build --compile --target=bun-windows-x64` (fetched from the npm registry once).
 *
 * wine 8 has no bcryptprimitives.dll, which Bun imports for ProcessPrng; a stub DLL built from
 * fixtures/bcryptprimitives.c is put next to the exe.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const FIXTURES = join(import.meta.dir, "fixtures");
const wine = ["/usr/lib/wine/wine64", Bun.which("wine64"), Bun.which("wine")].find((w) => w && existsSync(w)) ?? null;
const wineserver = ["/usr/lib/wine/wineserver", Bun.which("wineserver")].find((w) => w && existsSync(w)) ?? null;
const mingw = Bun.which("x86_64-w64-mingw32-gcc");
const wanted = process.env.GT_WINE_SMOKE === "1";
const usable = wanted && wine !== null && wineserver !== null && mingw !== null && process.platform === "linux";
if (!usable) {
  console.warn(
    wanted
      ? "note: GT_WINE_SMOKE=1 but wine64 / gcc-mingw-w64-x86-64-win32 are missing: wine smoke test skipped"
      : "note: wine smoke test skipped (set GT_WINE_SMOKE=1 to run it)",
  );
}

let dir = "";
let env: Record<string, string> = {};
const SERVICE = "gt-smoke";

let runs = 0;
/**
 * Output goes through a file, not a pipe: wine starts wineserver and services.exe in the
 * background, and they would hold a pipe open long after the command itself exited.
 */
async function run(cmd: string[], timeoutMs = 60_000): Promise<{ code: number; out: string }> {
  const outFile = join(dir, `run-${++runs}.out`);
  const proc = Bun.spawn(cmd, { env, stdout: Bun.file(outFile), stderr: Bun.file(outFile), stdin: "ignore" });
  const timer = setTimeout(() => proc.kill(), timeoutMs);
  const code = await proc.exited;
  clearTimeout(timer);
  return { code, out: existsSync(outFile) ? readFileSync(outFile, "utf8") : "" };
}

const sc = (...args: string[]) => run([wine!, "sc", ...args]);

async function waitForState(state: number, name = SERVICE, deadlineMs = 30_000): Promise<string> {
  const deadline = Date.now() + deadlineMs;
  for (;;) {
    const q = await sc("query", name);
    const m = /STATE\s*:\s*(\d+)/.exec(q.out);
    if (m && Number(m[1]) === state) return q.out;
    if (Date.now() > deadline) throw new Error(`service never reached state ${state}: ${q.out}`);
    await Bun.sleep(200);
  }
}

const logPath = () => join(dir, "svc.log");
const winPath = (p: string) => `Z:${p.replace(/\//g, "\\")}`;

beforeAll(async () => {
  if (!usable) return;
  dir = mkdtempSync(join(tmpdir(), "gt-wine-"));
  env = { ...(process.env as Record<string, string>), WINEPREFIX: join(dir, "prefix"), WINEDEBUG: "-all", WINEDLLOVERRIDES: "mscoree,mshtml=" };
  const dll = await run([mingw!, "-O2", "-shared", "-o", join(dir, "bcryptprimitives.dll"), join(FIXTURES, "bcryptprimitives.c"), join(FIXTURES, "bcryptprimitives.def"), "-ladvapi32"]);
  if (dll.code !== 0) throw new Error(`stub DLL: ${dll.out}`);
  const exe = await run([process.execPath, "build", "--compile", "--target=bun-windows-x64", join(FIXTURES, "wine-service-entry.ts"), "--outfile", join(dir, "gt-svc.exe")], 120_000);
  if (exe.code !== 0) throw new Error(`cross-compile: ${exe.out}`);
  // Order matters: let wineboot's server finish, then start a persistent one, which keeps
  // services.exe (and our service) alive between sc.exe calls. Starting the persistent server
  // before wineboot left two services.exe fighting over the service database.
  await run([wine!, "wineboot", "-i"], 120_000);
  await run([wineserver!, "-w"], 60_000);
  await run([wineserver!, "-p"]);
}, 240_000);

afterAll(async () => {
  if (!usable || !dir) return;
  await run([wineserver!, "-k"]);
  rmSync(dir, { recursive: true, force: true });
});

describe.skipIf(!usable)("a Bun-built exe as a Windows service under wine", () => {
  test("START_PENDING → RUNNING → /healthz → STOP → STOPPED with exit code 0", async () => {
    const binPath = `${winPath(join(dir, "gt-svc.exe"))} --windows-service --log ${winPath(logPath())}`;
    expect((await sc("create", SERVICE, "binPath=", binPath)).code).toBe(0);
    const started = await sc("start", SERVICE);
    expect(started.out).toMatch(/STATE\s*:\s*2\s+START_PENDING/); // our START_PENDING, reported from ServiceMain
    await waitForState(4);

    const port = /listening (\d+)/.exec(readFileSync(logPath(), "utf8"))?.[1];
    expect(port).toBeDefined();
    const res = await fetch(`http://127.0.0.1:${port}/healthz`);
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ state: "idle" });

    await sc("stop", SERVICE);
    const stopped = await waitForState(1);
    expect(stopped).toMatch(/WIN32_EXIT_CODE\s*:\s*0\b/);
    expect(readFileSync(logPath(), "utf8")).toContain("host windows-service\n");
    expect(readFileSync(logPath(), "utf8")).toContain("stop requested\nstopped 0\n");
  }, 90_000);

  test("a non-zero exit is reported as a service-specific error (what triggers recovery)", async () => {
    const binPath = `${winPath(join(dir, "gt-svc.exe"))} --windows-service --log ${winPath(logPath())} --exit-code 3`;
    // wine's sc.exe has no `config`: register the variant under its own name.
    expect((await sc("create", `${SERVICE}-3`, "binPath=", binPath)).code).toBe(0);
    await sc("start", `${SERVICE}-3`);
    await waitForState(4, `${SERVICE}-3`);
    await sc("stop", `${SERVICE}-3`);
    const stopped = await waitForState(1, `${SERVICE}-3`);
    expect(stopped).toMatch(/WIN32_EXIT_CODE\s*:\s*1066\b/);
    expect(stopped).toMatch(/SERVICE_EXIT_CODE\s*:\s*3\b/);
  }, 90_000);

  test("started from a console with the service flag: runs as a console program and says why", async () => {
    const log = join(dir, "console.log");
    const r = await run([wine!, join(dir, "gt-svc.exe"), "--windows-service", "--log", winPath(log)]);
    expect(r.code).toBe(0);
    expect(readFileSync(log, "utf8")).toContain("host console problem: --windows-service: the service control manager did not start this process");
  }, 60_000);
});
