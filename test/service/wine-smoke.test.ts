/**
 * The released Windows exe as a real service, under wine: src/main.ts is cross-compiled the way
 * build.ts builds a release, registered with `sc create` under the command line the installer
 * registers, started, asked for /healthz, stopped, and its states and exit codes read back from
 * the SCM. This is the only test that runs windows-scm.ts's FFI (StartServiceCtrlDispatcherW on a
 * native thread, thread-safe callbacks) and the whole start-up path of the real program under it.
 *
 * Runs where Debian's `wine64` and `gcc-mingw-w64-x86-64-win32` are installed and either CI is set
 * (.ci/system-deps.sh installs both) or GT_WINE_SMOKE=1; GT_WINE_SMOKE=0 skips it anywhere. It
 * takes ~25 s (a fresh wine prefix is most of it) and fetches Bun's Windows runtime from the npm
 * registry on first use.
 *
 * wine 8 has no bcryptprimitives.dll, which Bun imports for ProcessPrng; a stub DLL built from
 * fixtures/bcryptprimitives.c is put next to the exe.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { WINDOWS_SERVICE_FLAG } from "../../src/service/windows-install.ts";
import { parseExitCodes, parseState, serviceBinPath, SERVICE_NAME, STATE } from "../../src/service/windows-sc.ts";
import { startOllamaSim } from "../../src/sim/index.ts";
import { deadPort } from "../support/dead-port.ts";

const ROOT = join(import.meta.dir, "..", "..");
const FIXTURES = join(import.meta.dir, "fixtures");
const wine = ["/usr/lib/wine/wine64", Bun.which("wine64"), Bun.which("wine")].find((w) => w && existsSync(w)) ?? null;
const wineserver = ["/usr/lib/wine/wineserver", Bun.which("wineserver")].find((w) => w && existsSync(w)) ?? null;
const mingw = Bun.which("x86_64-w64-mingw32-gcc");
const tools = wine !== null && wineserver !== null && mingw !== null && process.platform === "linux";
const inCi = !!process.env.CI && process.env.CI !== "false" && process.env.CI !== "0";
const wanted = process.env.GT_WINE_SMOKE === "1" || (inCi && process.env.GT_WINE_SMOKE !== "0");
const usable = wanted && tools;
if (!usable) {
  console.warn(
    wanted
      ? "note: wine smoke test skipped: wine64 / gcc-mingw-w64-x86-64-win32 are not installed (.ci/system-deps.sh installs them)"
      : "note: wine smoke test skipped (runs in CI, or with GT_WINE_SMOKE=1, where wine64 and gcc-mingw-w64-x86-64-win32 are installed)",
  );
}

let dir = "";
let binDir = "";
let exe = "";
let env: Record<string, string> = {};

let runs = 0;
/**
 * Output goes through a file, not a pipe: wine starts wineserver and services.exe in the
 * background, and they would hold a pipe open long after the command itself exited.
 */
function start(cmd: string[]) {
  const outFile = join(dir, `run-${++runs}.out`);
  const proc = Bun.spawn(cmd, { env, stdout: Bun.file(outFile), stderr: Bun.file(outFile), stdin: "ignore" });
  return { proc, output: () => (existsSync(outFile) ? readFileSync(outFile, "utf8") : "") };
}

async function run(cmd: string[], timeoutMs = 60_000): Promise<{ code: number; out: string }> {
  const { proc, output } = start(cmd);
  const timer = setTimeout(() => proc.kill(), timeoutMs);
  const code = await proc.exited;
  clearTimeout(timer);
  return { code, out: output() };
}

const sc = (...args: string[]) => run([wine!, "sc", ...args]);

async function waitForState(name: string, state: number, deadlineMs = 20_000): Promise<string> {
  const deadline = Date.now() + deadlineMs;
  for (;;) {
    const q = await sc("query", name);
    if (parseState(q.out) === state) return q.out;
    if (Date.now() > deadline) throw new Error(`${name} never reached state ${state}; last sc query:\n${q.out}`);
    await Bun.sleep(200);
  }
}

/** Polls the log until the turnstile says where it listens; the port is ephemeral (LISTEN_OLLAMA=127.0.0.1:0). */
async function listenerPort(log: string, deadlineMs = 20_000): Promise<number> {
  const deadline = Date.now() + deadlineMs;
  for (;;) {
    const text = existsSync(log) ? readFileSync(log, "utf8") : "";
    const m = /ollama listener ready url=http:\/\/127\.0\.0\.1:(\d+)/.exec(text);
    if (m) return Number(m[1]);
    if (Date.now() > deadline) throw new Error(`no "ollama listener ready" line in ${log}:\n${text}`);
    await Bun.sleep(100);
  }
}

const winPath = (p: string) => `Z:${p.replace(/\//g, "\\")}`;

function envFile(path: string, logFile: string, overrides: Record<string, string> = {}): void {
  const settings = {
    // The Ollama upstream is down: /healthz must not care.
    OLLAMA_URL: `http://127.0.0.1:${deadPort()}`,
    LISTEN_OLLAMA: "127.0.0.1:0",
    AUTO_UPDATE: "false",
    LOG_FILE: winPath(logFile),
    ...overrides,
  };
  writeFileSync(path, Object.entries(settings).map(([k, v]) => `${k}=${v}\n`).join(""));
}

beforeAll(async () => {
  if (!usable) return;
  dir = mkdtempSync(join(tmpdir(), "gt-wine-"));
  binDir = join(dir, "bin");
  mkdirSync(binDir);
  exe = join(binDir, "gpu-turnstile.exe");
  env = { ...(process.env as Record<string, string>), WINEPREFIX: join(dir, "prefix"), WINEDEBUG: "-all", WINEDLLOVERRIDES: "mscoree,mshtml=" };
  const dll = await run([mingw!, "-O2", "-shared", "-o", join(binDir, "bcryptprimitives.dll"), join(FIXTURES, "bcryptprimitives.c"), join(FIXTURES, "bcryptprimitives.def"), "-ladvapi32"]);
  if (dll.code !== 0) throw new Error(`stub DLL: ${dll.out}`);
  // The release build, not a stand-in: same entry, flags and embedded version as CI's build step.
  const built = await run([process.execPath, join(ROOT, "build.ts"), "--target", "windows-x64", "--outdir", binDir], 180_000);
  if (built.code !== 0 || !existsSync(exe)) throw new Error(`build.ts --target windows-x64: ${built.out}`);
  // Order matters: let wineboot's server finish, then start a persistent one, which keeps
  // services.exe (and our service) alive between sc.exe calls. Starting the persistent server
  // before wineboot left two services.exe fighting over the service database.
  await run([wine!, "wineboot", "-i"], 120_000);
  await run([wineserver!, "-w"], 60_000);
  await run([wineserver!, "-p"]);
}, 400_000);

afterAll(async () => {
  if (!usable || !dir) return;
  // Ends every wine process of this prefix, the services included, whatever a failed test left.
  await run([wineserver!, "-k"]);
  rmSync(dir, { recursive: true, force: true });
});

describe.skipIf(!usable)("gpu-turnstile.exe as a Windows service under wine", () => {
  test("START_PENDING → RUNNING → /healthz idle → proxies a streamed chat → STOP → STOPPED with exit code 0, logged to LOG_FILE", async () => {
    // The Windows build's own upstream client (Bun.connect on Windows) talks to a real simulator.
    const ollama = await startOllamaSim({ tokenDelayMs: 10 });
    // The config is found where the installer puts it: gpu-turnstile.env beside the exe.
    const log = join(dir, "service.log");
    envFile(join(binDir, "gpu-turnstile.env"), log, { OLLAMA_URL: ollama.url });
    expect((await sc("create", SERVICE_NAME, "binPath=", serviceBinPath(winPath(exe), WINDOWS_SERVICE_FLAG))).code).toBe(0);

    const started = await sc("start", SERVICE_NAME);
    expect(parseState(started.out)).toBe(STATE.START_PENDING); // reported from ServiceMain, before the config is read
    await waitForState(SERVICE_NAME, STATE.RUNNING);
    // RUNNING is reported only once the listener is bound, so the port is already in the log.
    const port = await listenerPort(log, 1_000);
    const res = await fetch(`http://127.0.0.1:${port}/healthz`);
    expect(res.status).toBe(200);
    expect(await res.json()).toMatchObject({ state: "idle" });
    const tags = await fetch(`http://127.0.0.1:${port}/api/tags`);
    expect(await tags.json()).toEqual(await (await fetch(`${ollama.url}/api/tags`)).json());
    const chat = await fetch(`http://127.0.0.1:${port}/api/chat`, { method: "POST", body: JSON.stringify({ model: "llama3.2", messages: [{ role: "user", content: "hi" }] }) });
    const lines = (await chat.text()).trim().split("\n").map((l) => JSON.parse(l) as { done: boolean });
    expect(lines.length).toBeGreaterThan(2);
    expect(lines.at(-1)!.done).toBe(true);
    expect(await (await fetch(`http://127.0.0.1:${port}/healthz`)).json()).toMatchObject({ state: "idle", llm_inflight: 0 });
    await ollama.stop();

    const stopping = await sc("stop", SERVICE_NAME);
    expect([STATE.STOP_PENDING, STATE.STOPPED] as number[]).toContain(parseState(stopping.out)!);
    const stopped = await waitForState(SERVICE_NAME, STATE.STOPPED);
    expect(parseExitCodes(stopped)).toEqual({ win32: 0, service: 0 });
    // The process is gone, not just reported stopped: nothing answers on its port any more.
    await expect(fetch(`http://127.0.0.1:${port}/healthz`)).rejects.toThrow();

    const text = readFileSync(log, "utf8");
    expect(text).toMatch(/gpu-turnstile v\S+ starting config=.*gpu-turnstile\.env/);
    expect(text).toMatch(/shutting down[^\n]*\n[^\n]*stopped\n$/);
  }, 90_000);

  test("a config error ends the start as STOPPED with service-specific error 1 (what triggers recovery)", async () => {
    // Its own config through --config, as the installer registers a config kept elsewhere.
    const name = `${SERVICE_NAME}-bad-config`;
    const config = join(dir, "bad.env");
    envFile(config, join(dir, "bad.log"), { LISTEN_OLLAMA: "not-an-address" });
    // wine's sc.exe has no `config`: the variant gets its own name (ignored by an own-process service).
    expect((await sc("create", name, "binPath=", serviceBinPath(winPath(exe), WINDOWS_SERVICE_FLAG, winPath(config)))).code).toBe(0);
    await sc("start", name);
    const stopped = await waitForState(name, STATE.STOPPED);
    expect(parseExitCodes(stopped)).toEqual({ win32: 1066, service: 1 });
  }, 60_000);

  test("started from a console with the service flag: says why, runs as a console program, Ctrl-C stops it", async () => {
    const log = join(dir, "console.log");
    const config = join(dir, "console.env");
    envFile(config, log);
    const { proc, output } = start([wine!, exe, WINDOWS_SERVICE_FLAG, "--config", winPath(config)]);
    try {
      const port = await listenerPort(log);
      const res = await fetch(`http://127.0.0.1:${port}/healthz`);
      expect(res.status).toBe(200);
      // wine turns SIGINT into the console's Ctrl-C.
      proc.kill("SIGINT");
      expect(await proc.exited).toBe(0);
      expect(output()).toContain(
        `gpu-turnstile: ${WINDOWS_SERVICE_FLAG}: the service control manager did not start this process (StartServiceCtrlDispatcher failed); running as a console program`,
      );
      expect(readFileSync(log, "utf8")).toMatch(/shutting down[^\n]*\n[^\n]*stopped\n$/);
    } finally {
      proc.kill("SIGKILL");
    }
  }, 60_000);

  test("a second copy for the same Ollama refuses to start (the card claim's Global\\ mutex), naming the first; after a kill -9 a successor starts", async () => {
    const ollamaUrl = `http://127.0.0.1:${deadPort()}`;
    const [log1, log2] = [join(dir, "claim-1.log"), join(dir, "claim-2.log")];
    const [config1, config2] = [join(dir, "claim-1.env"), join(dir, "claim-2.env")];
    envFile(config1, log1, { OLLAMA_URL: ollamaUrl });
    envFile(config2, log2, { OLLAMA_URL: ollamaUrl });
    const first = start([wine!, exe, WINDOWS_SERVICE_FLAG, "--config", winPath(config1)]);
    try {
      const port = await listenerPort(log1);
      const second = await run([wine!, exe, WINDOWS_SERVICE_FLAG, "--config", winPath(config2)]);
      expect(second.code).not.toBe(0);
      const said = `${second.out}\n${existsSync(log2) ? readFileSync(log2, "utf8") : ""}`;
      expect(said).toMatch(new RegExp(`another gpu-turnstile \\(pid \\d+, listening on [^)]*127\\.0\\.0\\.1:${port}[^)]*\\) already guards ${ollamaUrl.replace(/[.]/g, "\\.")}`));
      // The first one is untouched.
      expect((await fetch(`http://127.0.0.1:${port}/healthz`)).status).toBe(200);
      // Killed hard, it leaves the mutex abandoned: a successor claims it at once.
      first.proc.kill("SIGKILL");
      await first.proc.exited;
      const log3 = join(dir, "claim-3.log");
      const config3 = join(dir, "claim-3.env");
      envFile(config3, log3, { OLLAMA_URL: ollamaUrl });
      const third = start([wine!, exe, WINDOWS_SERVICE_FLAG, "--config", winPath(config3)]);
      try {
        const port3 = await listenerPort(log3);
        expect((await fetch(`http://127.0.0.1:${port3}/healthz`)).status).toBe(200);
      } finally {
        third.proc.kill("SIGINT");
        await third.proc.exited;
      }
    } finally {
      first.proc.kill("SIGINT");
      await first.proc.exited;
    }
  }, 120_000);
});
