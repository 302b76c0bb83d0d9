/**
 * An Ollama that refuses connections on this machine holds no memory: emptying it ends at once.
 * Only a refusal, and only from this machine: a remote refusal (a firewall in front of a running
 * Ollama) or a connection that is accepted and dropped still gets the whole UNLOAD_TIMEOUT.
 */
import { afterEach, describe, expect, test } from "bun:test";
import { OllamaClient } from "../../src/ollama/client.ts";
import { emptyOllama } from "../../src/ollama/unload.ts";
import { namesThisMachine } from "../../src/proxy/host-guard.ts";
import { startOllamaSim } from "../../src/sim/index.ts";

const SETTINGS = { timeoutMs: 300, pollMs: 20, psTimeoutMs: 150 };
const stops: (() => unknown)[] = [];
afterEach(async () => {
  for (const s of stops.splice(0)) await s();
});

/** A client for a port nothing listens on, that routed a chat since /api/ps was last empty. */
async function deadOllama(refusalMeansGone: boolean): Promise<OllamaClient> {
  const sim = await startOllamaSim();
  await sim.stop();
  const c = new OllamaClient(new URL(sim.url), 1000);
  c.refusalMeansGone = refusalMeansGone;
  c.memory.routed("llama3.2");
  return c;
}

describe("emptyOllama against a refused connection", () => {
  test("on this machine: done at once, nothing tried, said why", async () => {
    const t0 = performance.now();
    const r = await emptyOllama(await deadOllama(true), SETTINGS);
    expect(performance.now() - t0).toBeLessThan(SETTINGS.timeoutMs);
    expect(r).toMatchObject({ complete: true, tried: [] });
    expect(r.notRunning).toContain("ECONNREFUSED");
  });

  test("not known to be this machine: blind unload until UNLOAD_TIMEOUT, as before", async () => {
    const t0 = performance.now();
    const r = await emptyOllama(await deadOllama(false), SETTINGS);
    expect(performance.now() - t0).toBeGreaterThanOrEqual(SETTINGS.timeoutMs - 5);
    expect(r).toMatchObject({ complete: false, tried: ["llama3.2"] });
    expect(r.notRunning).toBeUndefined();
  });

  test("accepted, then dropped (a reset, not a refusal): a process is there, so no shortcut", async () => {
    const server = Bun.listen({ hostname: "127.0.0.1", port: 0, socket: { open: (s) => void s.end(), data() {} } });
    stops.push(() => server.stop(true));
    const c = new OllamaClient(new URL(`http://127.0.0.1:${server.port}`), 1000);
    c.refusalMeansGone = true;
    c.memory.routed("llama3.2");
    const r = await emptyOllama(c, SETTINGS);
    expect(r.complete).toBe(false);
    expect(r.notRunning).toBeUndefined();
  });
});

describe("namesThisMachine: whose refusal proves nothing runs", () => {
  const own = () => ["127.0.0.1", "::1", "192.168.1.20", "fe80::1%eth0"];
  test.each([
    ["127.0.0.1", true],
    ["127.0.1.1", true],
    ["[::1]", true],
    ["localhost", true],
    ["ollama.localhost", true],
    ["LOCALHOST", true],
    ["gpubox", true],
    ["192.168.1.20", true],
    ["192.168.1.21", false],
    ["10.0.0.5", false],
    ["ollama", false],
    ["host.docker.internal", false],
  ])("%s → %p", (host, want) => {
    expect(namesThisMachine(host, "GPUBox", own)).toBe(want);
  });
});
