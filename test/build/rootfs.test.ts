/**
 * The FROM scratch image without Docker: build the real linux-x64 binary, assemble the root
 * folder with the script the Dockerfile runs (scripts/rootfs.sh), and start the binary inside
 * it — own mount and PID namespaces, /proc mounted (Bun aborts without it), chrooted, as the
 * image's non-root user 65532 — then ask /healthz and the status page.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { spawn, spawnSync } from "node:child_process";
import type { ChildProcess } from "node:child_process";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { build, gitVersion } from "../../build.ts";
import { deadPort } from "../support/dead-port.ts";

const repo = path.resolve(import.meta.dir, "../..");
const UID = 65532;

/** Namespaces and chroot need root; a developer without it gets a skip with a note (CI runs as root). */
const canNamespace =
  process.getuid?.() === 0 && spawnSync("unshare", ["--mount", "--pid", "--fork", "--mount-proc", "true"]).status === 0;
if (!canNamespace) console.warn("rootfs.test.ts: skipped — needs root with unshare(1) mount+pid namespaces");

let dir: string;
let rootfs: string;
let version: string;

beforeAll(async () => {
  if (!canNamespace) return;
  dir = fs.mkdtempSync(path.join(os.tmpdir(), "gt-rootfs-"));
  version = gitVersion();
  const [artifact] = await build({ targets: ["linux-x64"], entry: path.join(repo, "src/main.ts"), outdir: path.join(dir, "dist"), version });
  rootfs = path.join(dir, "rootfs");
  const r = spawnSync("sh", [path.join(repo, "scripts/rootfs.sh"), artifact?.path ?? "", rootfs], { encoding: "utf8" });
  if (r.status !== 0) throw new Error(`rootfs.sh failed: ${r.stderr}`);
}, 60_000);
afterAll(() => {
  if (dir) fs.rmSync(dir, { recursive: true, force: true });
});

/** argv that runs `args` as the image would: namespaces, /proc, chroot, uid 65532, a clean env. */
function inImage(args: string[]): string[] {
  return [
    "unshare", "--mount", "--pid", "--fork", "--kill-child", `--mount-proc=${path.join(rootfs, "proc")}`,
    "chroot", `--userspec=${UID}:${UID}`, rootfs, "/gpu-turnstile", ...args,
  ];
}

describe.skipIf(!canNamespace)("the image's root folder", () => {
  test("holds the binary, its shared libraries, users, CA certificates and /tmp — nothing else", () => {
    const files = spawnSync("find", [".", "-type", "f"], { cwd: rootfs, encoding: "utf8" }).stdout.trim().split("\n").sort();
    const libs = files.filter((f) => /\.so/.test(f));
    expect(files.filter((f) => !libs.includes(f))).toEqual([
      "./etc/group",
      "./etc/nsswitch.conf",
      "./etc/passwd",
      "./etc/ssl/certs/ca-certificates.crt",
      "./gpu-turnstile",
    ]);
    // every library ldd names is there, at the path the binary will look for it
    const ldd = spawnSync("ldd", [path.join(rootfs, "gpu-turnstile")], { encoding: "utf8" }).stdout;
    const wanted = [...ldd.matchAll(/(?:=> )?(\/\S+) \(0x/g)].map((m) => `.${m[1]}`).sort();
    expect(wanted.length).toBeGreaterThanOrEqual(2);
    expect(libs).toEqual(wanted);
    expect(fs.statSync(path.join(rootfs, "tmp")).mode & 0o7777).toBe(0o1777);
    expect(fs.readFileSync(path.join(rootfs, "etc/passwd"), "utf8")).toContain(`turnstile:x:${UID}:${UID}:`);
    expect(fs.statSync(path.join(rootfs, "etc/ssl/certs/ca-certificates.crt")).size).toBeGreaterThan(10_000);
  });

  test("--version runs inside it as uid 65532", () => {
    const [cmd, ...args] = inImage(["--version"]);
    const r = spawnSync(cmd ?? "", args, { encoding: "utf8", timeout: 15_000 });
    expect(r.stderr).toBe("");
    expect(r.stdout.trim()).toBe(`gpu-turnstile ${version}`);
  });

  test("serves /healthz from inside it, as a non-root user", async () => {
    const [cmd, ...args] = inImage([]);
    const child: ChildProcess = spawn(cmd ?? "", args, {
      env: {
        PATH: process.env.PATH,
        // a dead upstream: probes fail, which is logged and not fatal
        // (a port of its own: one turnstile per upstream on a machine, and test runs may overlap)
        OLLAMA_URL: `http://127.0.0.1:${deadPort()}`,
        LISTEN_OLLAMA: "127.0.0.1:0",
        LISTEN_COMFY: "127.0.0.1:0",
        LOGLEVEL: "warn",
        NO_COLOR: "1",
        // What the Dockerfile's ENV lines set in the image.
        AUTO_UPDATE: "false",
        BUN_CONFIG_MAX_HTTP_REQUESTS: "65535",
      },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let output = "";
    child.stdout?.on("data", (d: Buffer) => (output += d.toString()));
    child.stderr?.on("data", (d: Buffer) => (output += d.toString()));
    try {
      const url = await new Promise<string>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`no "listener ready" line within 15 s:\n${output}`)), 15_000);
        const look = (): void => {
          const m = /listener ready.*?url=(http:\/\/127\.0\.0\.1:\d+)/.exec(output);
          if (m?.[1]) {
            clearTimeout(timer);
            resolve(m[1]);
          }
        };
        child.stderr?.on("data", look);
        child.stdout?.on("data", look);
        child.on("exit", (code) => reject(new Error(`exited with ${code} before listening:\n${output}`)));
      });
      const res = await fetch(`${url}/healthz`);
      expect(res.status, output).toBe(200);
      expect(await res.json()).toMatchObject({ state: "idle", llm_inflight: 0, image_pending: false });
      // The status page is a chunk of its own, loaded at its first request (status/page-text.ts).
      const page = await fetch(`${url}/turnstile/`);
      expect(page.status, output).toBe(200);
      expect(await page.text()).toStartWith("<!doctype html>");
      const procs = processesIn(rootfs);
      expect(procs.length, output).toBeGreaterThan(0);
      expect(new Set(procs.map((p) => p.uid))).toEqual(new Set([UID]));
    } finally {
      // chroot's change of uid clears unshare's --kill-child death signal: end the namespace's
      // processes ourselves (killing its PID 1 ends them all).
      for (const p of processesIn(rootfs)) process.kill(p.pid, "SIGKILL");
      child.kill("SIGKILL");
    }
  });
});

/** The processes whose root directory is `dir`, with their real uid (seen from the host's /proc). */
function processesIn(dir: string): { pid: number; uid: number }[] {
  const found: { pid: number; uid: number }[] = [];
  for (const pid of fs.readdirSync("/proc").filter((p) => /^\d+$/.test(p))) {
    try {
      if (fs.readlinkSync(`/proc/${pid}/root`) !== dir) continue;
      const m = /^Uid:\s+(\d+)/m.exec(fs.readFileSync(`/proc/${pid}/status`, "utf8"));
      if (m?.[1]) found.push({ pid: Number(pid), uid: Number(m[1]) });
    } catch {
      // the process ended while we looked
    }
  }
  return found;
}
