/**
 * Credentials written into OLLAMA_URL / COMFY_URL are for the upstream only. The real entry point
 * (`bun src/main.ts`) runs with credentialed URLs — Ollama a simulator, ComfyUI a server that resets
 * every connection, so probes fail and /prompt gets a 502 — and everything it says is searched
 * for the secrets: its whole stdout and stderr from start to stop, every response body and header,
 * /metrics and /healthz, at the default level and at debug, in text and in JSON.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { DEFAULT_MODELS, type OllamaSim, startOllamaSim } from "../../../src/sim/index.ts";
import { promptBody, until } from "./helpers.ts";

const MAIN = join(import.meta.dir, "../../../src/main.ts");
const SECRETS = ["S3cretPW", "C0mfyPW", "admin", "comfyuser"];

let cwd: string;
let ollama: OllamaSim;
let reset: Bun.TCPSocketListener<undefined>;
beforeAll(async () => {
  cwd = mkdtempSync(join(tmpdir(), "turnstile-secrets-"));
  ollama = await startOllamaSim({ loadMs: 5, unloadMs: 5, tokenDelayMs: 1 });
  reset = Bun.listen({ hostname: "127.0.0.1", port: 0, socket: { data: (sock) => sock.terminate() } });
});
afterAll(async () => {
  reset.stop(true);
  await ollama.stop();
  rmSync(cwd, { recursive: true, force: true });
});

/** `http://user:pass@host:port` for a local `http://host:port`. */
const withCredentials = (url: string, user: string, pass: string) => url.replace("http://", `http://${user}:${pass}@`);

async function run(extra: Record<string, string>): Promise<string> {
  const env = {
    PATH: process.env.PATH ?? "/usr/bin:/bin",
    HOME: cwd,
    AUTO_UPDATE: "false",
    NO_COLOR: "1",
    LISTEN_OLLAMA: "127.0.0.1:0",
    LISTEN_COMFY: "127.0.0.1:0",
    OLLAMA_URL: withCredentials(ollama.url, "admin", "S3cretPW"),
    COMFY_URL: `http://comfyuser:C0mfyPW@127.0.0.1:${reset.port}`,
    HEALTH_INTERVAL: "0",
    ...extra,
  };
  const p = Bun.spawn([process.execPath, MAIN], { cwd, env, stdout: "pipe", stderr: "pipe" });
  let output = "";
  const drain = async (stream: ReadableStream<Uint8Array>) => {
    const dec = new TextDecoder();
    for await (const chunk of stream) output += dec.decode(chunk, { stream: true });
  };
  const drained = Promise.all([drain(p.stdout), drain(p.stderr)]);
  try {
    await until(() => output.includes("comfy listener ready") && output.includes("ollama listener ready"), "both listeners", 15_000);
    const port = (name: string) => new RegExp(`${name} listener ready.*?url"?[=:]"?http://127\\.0\\.0\\.1:(\\d+)`).exec(output)?.[1];
    const o = `http://127.0.0.1:${port("ollama")}`;
    const c = `http://127.0.0.1:${port("comfy")}`;

    const said: string[] = [];
    const keep = async (res: Response) => {
      said.push(`${res.status} ${JSON.stringify([...res.headers])} ${await res.text()}`);
      return res.status;
    };
    expect(await keep(await fetch(`${o}/api/tags`))).toBe(200);
    const gen = { model: DEFAULT_MODELS[0]!.name, prompt: "hi", stream: false };
    expect(await keep(await fetch(`${o}/api/generate`, { method: "POST", body: JSON.stringify(gen) }))).toBe(200);
    expect(await keep(await fetch(`${c}/prompt`, { method: "POST", body: promptBody(10), headers: { "content-type": "application/json" } }))).toBe(502);
    for (const base of [o, c]) {
      expect(await keep(await fetch(`${base}/healthz`))).toBe(200);
      expect(await keep(await fetch(`${base}/metrics`))).toBe(200);
    }
    expect(said.filter((s) => s.startsWith("502 ") && s.includes("could not reach ComfyUI")).length).toBe(1);

    p.kill("SIGTERM");
    expect(await p.exited).toBe(0);
    await drained;
    return `${output}\n${said.join("\n")}`;
  } finally {
    if (p.exitCode === null && p.signalCode === null) {
      p.kill("SIGTERM");
      await Promise.race([p.exited, new Promise((r) => setTimeout(r, 3000))]);
      p.kill("SIGKILL");
    }
  }
}

describe("credentials in upstream URLs never reach any output", () => {
  test.each([
    ["the default level", {}],
    ["LOGLEVEL=debug", { LOGLEVEL: "debug" }],
    ["LOGLEVEL=debug, LOG_FORMAT=json", { LOGLEVEL: "debug", LOG_FORMAT: "json" }],
  ] as const)("%s", async (_name, extra) => {
    const all = await run(extra);
    // It did talk about the upstreams — masked.
    expect(all.includes(`http://***@127.0.0.1:${reset.port}`)).toBe(true);
    expect(all.includes(`http://***@127.0.0.1:${new URL(ollama.url).port}`)).toBe(true);
    // One line per hit, so a failure shows where a secret got out without dumping everything.
    expect(all.split("\n").filter((line) => SECRETS.some((s) => line.includes(s)))).toEqual([]);
  });

  test("a password holding `@`, a space and quotes is masked whole, at debug", async () => {
    const pieces = ["Pz9q", "Wk7x", "Jm4", "Xv8", "Rt5w"];
    const all = await run({ LOGLEVEL: "debug", OLLAMA_URL: withCredentials(ollama.url, "admin", `Pz9q@Wk7x Jm4'Xv8"Rt5w`) });
    expect(all.includes(`http://***@127.0.0.1:${new URL(ollama.url).port}`)).toBe(true);
    expect(all.split("\n").filter((line) => pieces.some((s) => line.includes(s)))).toEqual([]);
  });
});
