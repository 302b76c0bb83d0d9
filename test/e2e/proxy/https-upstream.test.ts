/**
 * An https upstream (Ollama behind a TLS front with its own CA): the one case still proxied
 * through fetch. Started as a user starts it, the turnstile re-runs itself once to lift Bun's
 * fetch limit; a streamed chat arrives piece by piece and holds its GPU slot until it ends.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Server } from "bun";
import { type OllamaSim, startOllamaSim } from "../../../src/sim/index.ts";
import { childCount, until } from "../../support/turnstile.ts";

const MAIN = join(import.meta.dir, "../../../src/main.ts");
const openssl = Bun.which("openssl");
let dir: string;
let ollama: OllamaSim;
let front: Server<undefined>;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "turnstile-https-"));
  if (!openssl) return;
  execFileSync(openssl, ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", join(dir, "key.pem"), "-out", join(dir, "cert.pem"), "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"], { stdio: "ignore" });
  ollama = await startOllamaSim({ tokenDelayMs: 30, tokens: 8 });
  // The TLS front: what a reverse proxy with a private CA in front of Ollama looks like.
  front = Bun.serve({
    hostname: "127.0.0.1",
    port: 0,
    tls: { key: readFileSync(join(dir, "key.pem"), "utf8"), cert: readFileSync(join(dir, "cert.pem"), "utf8") },
    fetch: (r) => {
      const u = new URL(r.url);
      return fetch(`${ollama.url}${u.pathname}${u.search}`, { method: r.method, headers: r.headers, body: r.body, decompress: false } as RequestInit);
    },
  });
});
afterAll(async () => {
  front?.stop(true);
  await ollama?.stop();
  rmSync(dir, { recursive: true, force: true });
});

test.skipIf(!openssl || process.platform !== "linux")("an https upstream: the start re-runs once, a chat streams through fetch and gives its slot back at the end", async () => {
  const p = Bun.spawn([process.execPath, MAIN], {
    cwd: dir,
    env: {
      PATH: process.env.PATH ?? "/usr/bin:/bin",
      OLLAMA_URL: `https://127.0.0.1:${front.port}`,
      LISTEN_OLLAMA: "127.0.0.1:0",
      AUTO_UPDATE: "false",
      NO_COLOR: "1",
      NODE_EXTRA_CA_CERTS: join(dir, "cert.pem"),
    },
    stdout: "ignore",
    stderr: "pipe",
  });
  let err = "";
  const reading = (async () => {
    for await (const c of p.stderr) err += new TextDecoder().decode(c);
  })();
  try {
    await until(() => err.includes("listener ready"), "the turnstile to listen", 15_000);
    expect(childCount(p.pid)).toBe(1);
    const base = /ollama listener ready url=(http:\/\/127\.0\.0\.1:\d+)/.exec(err)![1]!;
    const res = await fetch(`${base}/api/chat`, { method: "POST", body: JSON.stringify({ model: "llama3.2", messages: [{ role: "user", content: "hi" }] }) });
    expect(res.status).toBe(200);
    const reader = res.body!.getReader();
    const first = await reader.read();
    expect(new TextDecoder().decode(first.value)).toContain('"done":false');
    // Mid-stream the slot is held …
    expect(((await (await fetch(`${base}/healthz`)).json()) as { llm_inflight: number }).llm_inflight).toBe(1);
    let rest = "";
    for (;;) {
      const r = await reader.read();
      if (r.done) break;
      rest += new TextDecoder().decode(r.value);
    }
    expect(rest).toContain('"done":true');
    // … and given back once the answer has ended.
    let health = { state: "", llm_inflight: -1 };
    await until(async () => {
      health = (await (await fetch(`${base}/healthz`)).json()) as typeof health;
      return health.llm_inflight === 0;
    }, "the slot to be released");
    expect(health.state).toBe("idle");
  } finally {
    p.kill("SIGTERM");
    await p.exited;
    await reading;
  }
  expect(err).not.toContain("certificate");
});
