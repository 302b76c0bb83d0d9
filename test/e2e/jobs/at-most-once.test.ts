/**
 * At most once: when a kept-alive connection to an upstream closes after it read a POST and before
 * it answered, the turnstile does not send that POST again — on a real card a second /prompt is a
 * second picture nobody asked for. The client gets a 502 in its dialect, the lock is released,
 * and the GPU ledger shows no overlap. GETs keep their retry (Go's net/http rule).
 */
import { afterEach, describe, expect, test } from "bun:test";
import type { Socket } from "bun";
import { poolFor } from "../../../src/upstream/h1-pool.ts";
import { SimGpu, startComfySim, startOllamaSim } from "../../../src/sim/index.ts";
import { startTestTurnstile, type TestTurnstile } from "../../support/turnstile.ts";
import { FAST_COMFY, FAST_OLLAMA, callsTo, chat, jobCounts, newPromptId, promptBody, submit, total, until } from "./helpers.ts";

const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

type Drop = (method: string, path: string) => boolean;

/**
 * Both simulators on one GPU and a turnstile in front, with a scripted front between the
 * turnstile and one of them.
 */
async function stackWithFront(which: "ollama" | "comfy", drop: Drop) {
  const gpu = new SimGpu();
  const ollama = await startOllamaSim({ ...FAST_OLLAMA, gpu });
  const comfy = await startComfySim({ ...FAST_COMFY, gpu });
  cleanups.push(() => Promise.all([ollama.stop(), comfy.stop()]));
  const front = scriptedFront(new URL(which === "ollama" ? ollama.url : comfy.url), drop);
  const t: TestTurnstile = startTestTurnstile({
    OLLAMA_URL: which === "ollama" ? front.url.href : ollama.url,
    COMFY_URL: which === "comfy" ? front.url.href : comfy.url,
  });
  cleanups.push(() => t.close());
  await t.probed;
  return { gpu, ollama, comfy, front, t };
}

interface FrontConn {
  up: Socket<FrontConn> | undefined;
  /** Bytes from the turnstile that arrived before the connection to the simulator was open. */
  early: Uint8Array[];
  /** Requests this connection carried so far. */
  requests: number;
  client: Socket<FrontConn>;
}

const REQUEST_LINE = /^([A-Z]+) (\S+) HTTP\/1\.1\r\n/;

/**
 * A raw TCP front for a simulator: bytes pass both ways, except that a request matching `drop`
 * on a connection that already carried one is read and then the connection is closed without an
 * answer — the moment a real upstream restarts or cuts an idle connection. Every request line the
 * turnstile sent is recorded, relayed or not.
 */
function scriptedFront(sim: URL, drop: Drop) {
  const seen: string[] = [];
  const dropped: string[] = [];
  const listener = Bun.listen<FrontConn>({
    hostname: "127.0.0.1",
    port: 0,
    socket: {
      open(client) {
        const c: FrontConn = { up: undefined, early: [], requests: 0, client };
        client.data = c;
        void Bun.connect<FrontConn>({
          hostname: sim.hostname,
          port: Number(sim.port),
          data: c,
          socket: {
            data: (_u, bytes) => void c.client.write(bytes),
            close: () => void c.client.end(),
            error: () => c.client.terminate(),
          },
        }).then((up) => {
          c.up = up;
          for (const b of c.early.splice(0)) up.write(b);
        });
      },
      data(client, bytes) {
        const c = client.data;
        // The pooled client writes a small request's head and body in one piece: a request starts a read.
        const line = REQUEST_LINE.exec(Buffer.from(bytes.subarray(0, 200)).toString("latin1"));
        if (line) {
          seen.push(`${line[1]} ${line[2]}`);
          if (c.requests++ > 0 && drop(line[1]!, line[2]!)) {
            dropped.push(`${line[1]} ${line[2]}`);
            c.up?.terminate();
            return void client.terminate();
          }
        }
        if (c.up) c.up.write(bytes);
        else c.early.push(bytes);
      },
      close: (client) => void client.data.up?.end(),
    },
  });
  cleanups.push(() => listener.stop(true));
  const url = new URL(`http://127.0.0.1:${listener.port}`);
  return { url, seen: (prefix: string) => seen.filter((l) => l.startsWith(prefix)), dropped };
}

/** A request through the turnstile so the pool holds a kept-alive connection to `upstream`. */
async function warmConnection(through: string, upstream: URL): Promise<void> {
  const res = await fetch(through);
  expect(res.status).toBe(200);
  await res.arrayBuffer();
  await until(() => poolFor(upstream).idleCount > 0, "a kept-alive connection back in the pool");
}

describe("a POST the upstream read and never answered is not sent again", () => {
  test("/prompt: one reaches ComfyUI, 502 in ComfyUI's dialect, upstream_error, lock released, no overlap", async () => {
    // Only the first: the next picture's /prompt also goes out on a kept-alive connection (its
    // prompt_id was checked with ComfyUI first), and it must go through.
    let once = false;
    const s = await stackWithFront("comfy", (m, p) => !once && m === "POST" && p === "/prompt" && (once = true));
    const comfySim = s.comfy;
    await warmConnection(`${s.t.comfyUrl}/system_stats`, s.front.url);
    comfySim.clearCalls();
    const res = await submit(s.t, promptBody(newPromptId()));
    expect(res.status).toBe(502);
    const body = (await res.json()) as { error: { type: string; message: string }; node_errors: object };
    expect(body.error.type).toBe("upstream_unreachable");
    expect(body.error.message).toContain("not sent again");
    expect(body.node_errors).toEqual({});
    expect(s.front.seen("POST /prompt")).toEqual(["POST /prompt"]);
    expect(s.front.dropped).toEqual(["POST /prompt"]);
    expect(callsTo(comfySim.calls, "/prompt", "POST")).toEqual([]);

    await s.t.settled();
    const counts = await jobCounts(s.t);
    expect(counts.upstream_error).toBe(1);
    expect(total(counts)).toBe(1);
    expect(s.t.health()).toMatchObject({ state: "idle", llm_inflight: 0, image_pending: false });
    const c = await chat(s.t);
    expect(c.status).toBe(200);
    await c.text();

    // The next picture goes through as usual: the rule costs nothing when nothing breaks.
    const next = await submit(s.t, promptBody(newPromptId()));
    expect(next.status).toBe(200);
    await next.text();
    await s.t.settled();
    expect(s.front.seen("POST /prompt")).toHaveLength(2);
    expect(callsTo(comfySim.calls, "/prompt", "POST")).toHaveLength(1);
    expect(s.gpu.overlaps()).toEqual([]);
  });

  test("/api/chat: one reaches Ollama, 502 in Ollama's dialect, the LLM slot is given back", async () => {
    const s = await stackWithFront("ollama", (m, p) => m === "POST" && p === "/api/chat");
    await warmConnection(`${s.t.ollamaUrl}/api/tags`, s.front.url);
    s.ollama.clearCalls();
    const res = await chat(s.t);
    expect(res.status).toBe(502);
    const body = (await res.json()) as { error: string };
    expect(body.error).toContain("not sent again");
    expect(s.front.seen("POST /api/chat")).toEqual(["POST /api/chat"]);
    expect(callsTo(s.ollama.calls, "/api/chat")).toEqual([]);
    expect(s.t.health()).toMatchObject({ state: "idle", llm_inflight: 0 });

    // An image job right after gets the card: nothing was left holding the LLM side.
    const img = await submit(s.t, promptBody(newPromptId()));
    expect(img.status).toBe(200);
    await img.text();
    await s.t.settled();
    expect(s.gpu.overlaps()).toEqual([]);
  });

  test("a GET on the same kind of connection is sent again and answered", async () => {
    const s = await stackWithFront("ollama", (m, p) => m === "GET" && p === "/api/tags");
    await warmConnection(`${s.t.ollamaUrl}/api/version`, s.front.url);
    const res = await fetch(`${s.t.ollamaUrl}/api/tags`);
    expect(res.status).toBe(200);
    await res.arrayBuffer();
    expect(s.front.dropped).toEqual(["GET /api/tags"]);
    expect(s.front.seen("GET /api/tags")).toEqual(["GET /api/tags", "GET /api/tags"]);
  });
});
