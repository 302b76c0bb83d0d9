/**
 * Ctrl-C in a terminal signals the whole foreground process group. Started from a shell with an
 * https upstream (proxied through fetch), the turnstile runs as a child of the launcher that
 * lifted Bun's fetch limit, so one Ctrl-C reaches it twice (from the terminal and forwarded by
 * the launcher). It must still stop gracefully — a second Ctrl-C, later, is what forces an exit.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { childCount, until } from "../../support/turnstile.ts";
import { deadPort } from "../../support/dead-port.ts";

const MAIN = join(import.meta.dir, "../../../src/main.ts");
const setsid = Bun.which("setsid");
let cwd: string;
beforeAll(() => {
  cwd = mkdtempSync(join(tmpdir(), "turnstile-ctrlc-"));
});
afterAll(() => rmSync(cwd, { recursive: true, force: true }));

test.skipIf(!setsid)("one Ctrl-C to the process group stops it gracefully (launcher and child both get it)", async () => {
  // setsid: a process group of our own, as a terminal's foreground job has; pid == pgid.
  const p = Bun.spawn([setsid!, process.execPath, MAIN], {
    cwd,
    env: {
      PATH: process.env.PATH ?? "/usr/bin:/bin",
      // A port of its own: one turnstile per upstream on a machine, and test runs may overlap.
      OLLAMA_URL: `https://127.0.0.1:${deadPort()}`,
      LISTEN_OLLAMA: "127.0.0.1:0",
      AUTO_UPDATE: "false",
      HEALTH_INTERVAL: "0",
    },
    stdout: "pipe",
    stderr: "pipe",
  });
  let err = "";
  const reading = (async () => {
    for await (const chunk of p.stderr) err += new TextDecoder().decode(chunk);
  })();
  await until(() => err.includes("listener ready"), "the turnstile to listen", 15_000);
  // The launcher and its re-run child: the situation this test is about.
  expect(childCount(p.pid)).toBe(1);
  process.kill(-p.pid, "SIGINT");
  const code = await p.exited;
  await reading;
  expect(err).toContain("shutting down");
  expect(err).toContain("stopped");
  expect(err).not.toContain("again: exiting without waiting");
  expect(code).toBe(0);
});
