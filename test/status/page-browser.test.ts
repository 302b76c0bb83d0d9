/**
 * The status page in a real browser (Debian's `chromium`, driven over the DevTools protocol), in
 * every state an operator meets: idle, chats (their model loaded), an image session of several
 * jobs with a waiter (the model unloaded), a lease, the server gone and back — live from
 * /turnstile/events. Saves a screenshot of each state, on a desktop and at a phone's width, to the
 * temp directory; with UPDATE_SCREENSHOT=1 to docs/screenshots/ instead, and the session's to
 * docs/status-page.png (the README's; a run would otherwise leave those files changed every time).
 * Skips with a note where chromium is missing.
 */
import { afterEach, expect, test } from "bun:test";
import { existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { GpuEvent } from "../../src/sim/index.ts";
import { now } from "../../src/sim/clock.ts";
import { newPromptId, postJson, promptBody, startStack, submit, until, type Stack } from "../e2e/jobs/helpers.ts";
import { startTestTurnstile, type TestTurnstile } from "../support/turnstile.ts";

const CHROMIUM = "/usr/bin/chromium";
const haveChromium = existsSync(CHROMIUM);
if (!haveChromium) console.warn(`note: ${CHROMIUM} is missing; the status page browser test skips (apt-get install chromium)`);

/** A page in headless Chromium, spoken to over the DevTools protocol. */
async function openPage(url: string) {
  const profile = mkdtempSync(join(tmpdir(), "turnstile-chromium-"));
  const proc = Bun.spawn(
    [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run", "--no-proxy-server", `--user-data-dir=${profile}`, "--remote-debugging-port=0", "--window-size=900,1100", "about:blank"],
    { stdout: "ignore", stderr: "pipe" },
  );
  const reader = proc.stderr.pipeThrough(new TextDecoderStream()).getReader();
  let err = "";
  let browserWs: string | undefined;
  while (!browserWs) {
    const { done, value } = await reader.read();
    if (done) throw new Error(`chromium exited: ${err}`);
    err += value;
    browserWs = /DevTools listening on (ws:\/\/\S+)/.exec(err)?.[1];
  }
  void (async () => {
    while (!(await reader.read()).done);
  })();
  const port = new URL(browserWs).port;
  const targets = (await (await fetch(`http://127.0.0.1:${port}/json/list`)).json()) as { type: string; webSocketDebuggerUrl: string }[];
  const ws = new WebSocket(targets.find((t) => t.type === "page")!.webSocketDebuggerUrl);
  await new Promise((r, j) => ((ws.onopen = r), (ws.onerror = j)));
  let nextId = 1;
  const pending = new Map<number, (m: any) => void>();
  ws.onmessage = (m) => {
    const msg = JSON.parse(String(m.data));
    pending.get(msg.id)?.(msg);
    pending.delete(msg.id);
  };
  const send = (method: string, params: object = {}) =>
    new Promise<any>((resolve) => {
      const id = nextId++;
      pending.set(id, resolve);
      ws.send(JSON.stringify({ id, method, params }));
    });
  await send("Page.enable");
  await send("Page.navigate", { url });
  return {
    async text(selector: string): Promise<string> {
      const r = await send("Runtime.evaluate", { expression: `document.querySelector(${JSON.stringify(selector)})?.textContent ?? ""`, returnByValue: true });
      return r.result?.result?.value ?? "";
    },
    async run(expression: string): Promise<unknown> {
      const r = await send("Runtime.evaluate", { expression, returnByValue: true });
      return r.result?.result?.value;
    },
    /** The whole page as laid out at `width` CSS px (a phone's when narrow), from its top. */
    async screenshot(path: string, width = 900) {
      const mobile = width < 600;
      await send("Emulation.setDeviceMetricsOverride", { width, height: mobile ? 844 : 1100, deviceScaleFactor: 1, mobile });
      const height = Number((await send("Runtime.evaluate", { expression: "document.documentElement.scrollHeight", returnByValue: true })).result?.result?.value ?? 1100);
      const r = await send("Page.captureScreenshot", { format: "png", captureBeyondViewport: true, clip: { x: 0, y: 0, width, height, scale: 1 } });
      await send("Emulation.clearDeviceMetricsOverride");
      writeFileSync(path, Buffer.from(r.result.data, "base64"));
    },
    async close() {
      ws.close();
      proc.kill();
      await proc.exited;
      rmSync(profile, { recursive: true, force: true });
    },
  };
}

let stack: Stack | undefined;
let page: Awaited<ReturnType<typeof openPage>> | undefined;
/** A turnstile started again on the stack's ports (the "server back" state). */
let again: TestTurnstile | undefined;
afterEach(async () => {
  await page?.close();
  await again?.close();
  await stack?.stop();
  page = undefined;
  stack = undefined;
  again = undefined;
});

const UPDATE = process.env.UPDATE_SCREENSHOT === "1";
/** Where each state's screenshot goes: docs/screenshots/ with UPDATE_SCREENSHOT=1, else the temp directory. */
const shotPath = (name: string) => (UPDATE ? new URL(`../../docs/screenshots/page-${name}.png`, import.meta.url).pathname : join(tmpdir(), `gpu-turnstile-page-${name}.png`));

/** A state on a desktop and at a phone's width; the session's desktop one is also the README's. */
async function shots(p: { screenshot(path: string, width?: number): Promise<void> }, name: string, readme = false) {
  await p.screenshot(shotPath(`${name}-desktop`));
  await p.screenshot(shotPath(`${name}-phone`), 390);
  if (readme && UPDATE) await p.screenshot(new URL("../../docs/status-page.png", import.meta.url).pathname);
}

test.skipIf(!haveChromium)("every state of the page: idle, chats loading a model, a session of several jobs with a waiter, a lease, the server gone and back", async () => {
  // Probes an hour apart: whatever the card section shows after the start, the page's own reads brought.
  stack = await startStack({
    ollama: { tokenDelayMs: 100, tokens: 30, loadMs: 200, unloadMs: 100 },
    comfy: { jobMs: 2000, freeDelayMs: 50 },
    // FAIR_TURNS=false: the session's three jobs from one client all sit in ComfyUI's queue.
    env: { IMAGE_SESSION_MAX: "30s", HEALTH_INTERVAL: "1h", CARD_NAME: "desk-4090", FAIR_TURNS: "false" },
  });
  const { t, gpu } = stack;
  const marks: GpuEvent[] = [];
  gpu.on((e) => (e.kind === "loaded" || e.kind === "unloaded") && e.tenant === "ollama" && marks.push(e));
  const mark = (kind: GpuEvent["kind"]) => marks.find((m) => m.kind === kind)?.at;
  page = await openPage(`${t.comfyUrl}/turnstile/`);
  const p = page;
  const text = (sel: string) => p.text(sel);
  const shown = (sel: string, want: string, what: string) => until(async () => (await text(sel)).includes(want), what, 10_000);

  // Idle: live, the card as its upstreams last said.
  await until(async () => (await text("#state")) === "idle", "idle", 15_000);
  expect(await text("#conn")).toBe("live");
  await shown("#models", "Ollama holds no model", "Ollama's empty /api/ps");
  await shown("#card", "ComfyUI sees", "ComfyUI's memory");
  // Which card this is, in the header; the upstreams with a header row and where they are.
  expect(await text("#card-name")).toBe("desk-4090");
  expect(await p.run(`document.querySelector("h1").getBoundingClientRect().height < 60`)).toBe(true);
  const upstreams = await text("#upstreams");
  expect(upstreams).toStartWith("upstreamstateversionURLreason");
  expect(upstreams).toContain(stack.ollama!.url);
  expect(upstreams).toContain(stack.comfy!.url);
  expect(upstreams).not.toMatch(/(^|[^\w])-([^\w]|$)/);
  await shots(p, "1-idle");

  // Chats: two streams hold the card; their model shows as loaded while they run (within 2 s of
  // the load), and their table is first: they are all that goes on.
  const chat = (model: string) => postJson(`${t.ollamaUrl}/api/chat`, { model, stream: true, messages: [{ role: "user", content: "hi" }] });
  const chats = [chat("llama3.2"), chat("llama3.2")];
  await shown("#llm-summary", "2 in flight", "two chats in flight");
  expect(await text("#state")).toBe("llm");
  await until(() => mark("loaded") !== undefined, "the chats' model loaded", 10_000);
  await until(async () => (await text("#models")).includes("llama3.2:latest"), "the loaded model on the page", 5000);
  expect(now() - mark("loaded")!).toBeLessThan(2000);
  expect(await text("#models")).toContain("100% GPU");
  expect(await p.run(`document.querySelector("main section").id`)).toBe("llm-card");
  await shots(p, "2-chats-model-loaded");
  await Promise.all(chats.map(async (c) => (await c).text()));

  // A session of three jobs from one client with its /ws relayed: one runs with its step, two
  // queue in ComfyUI; a chat waits behind the session, and says so.
  const clientId = "page-client";
  const ws = new WebSocket(`${t.comfyUrl.replace("http", "ws")}/ws?clientId=${clientId}`);
  await new Promise((r, j) => ((ws.onopen = r), (ws.onerror = j)));
  const withClient = (id: string) => JSON.stringify({ ...JSON.parse(promptBody(id)), client_id: clientId });
  const ids = [newPromptId(), newPromptId(), newPromptId()];
  const jobs = ids.map((id) => submit(t, withClient(id)));
  // The session empties Ollama first: the model shows as gone within 2 s of its unload.
  await until(() => mark("unloaded") !== undefined, "the model unloaded for the session", 10_000);
  await until(async () => (await text("#models")).includes("Ollama holds no model"), "the unload on the page", 5000);
  expect(now() - mark("unloaded")!).toBeLessThan(2000);
  await shown("#image", "2 queued in ComfyUI", "two jobs queued behind the running one");
  const jobsTable = await text("#jobs");
  for (const id of ids) expect(jobsTable).toContain(id);
  expect(jobsTable).toContain(`client_id ${clientId}`);
  expect(jobsTable).toContain("in ComfyUI's queue");
  await shown("#image", "step ", "the running job's step");
  const waiter = postJson(`${t.ollamaUrl}/api/chat`, { model: "qwen2.5:7b", stream: false, messages: [{ role: "user", content: "hi" }] });
  const runningJob = () => t.status.snapshot(false).image.running?.job;
  const behindRunning = async () => (await text("#waiting")).includes(`behind image job ${runningJob()}`);
  await until(behindRunning, "the chat waiting behind the running job, with its reason", 10_000);
  const first = runningJob();
  expect(await text("#waiting")).toMatch(/~\d+ s/);
  // Polled: between two of the session's jobs the running card is briefly empty.
  await until(async () => (await text("#phase")) === "running", "the running job's phase", 10_000);
  expect(await p.run(`document.querySelector("main section").id`)).toBe("image-card");
  await shown("#jobs", "/20", "a step in the jobs table");
  await shots(p, "3-session-with-waiter", true);
  // The reason moves with the session: behind the next job once the first is done.
  await until(() => runningJob() !== first, "the session's next job running", 10_000);
  if (runningJob() !== undefined) await until(behindRunning, "the waiter's reason following the running job", 5000);
  await Promise.all(jobs.map(async (j) => (await j).text()));
  await (await waiter).text();
  ws.close();
  await t.settled();
  await shown("#state", "idle", "idle after the session");
  for (const id of ids) await shown("#recent", id, "the session's jobs in the recent list");
  expect(await text("#recent")).toContain("completed");
  expect(await text("#upstreams")).toContain("up");

  // A lease taken on the page: "Take a lease" waits while it is held; a second lease asked for
  // elsewhere shows as a lease waiting, not as an image job; force-release ends both.
  await until(async () => (await p.run(`document.querySelector("#steer").hidden === false`)) === true, "the steering controls", 10_000);
  await p.run(`document.querySelector("#holder").value = "browser test"; document.querySelector("#lease-form").requestSubmit()`);
  await shown("#lease", "taken here", "the page's own lease");
  expect(await text("#lease")).toContain("from 127.0.0.1"); // who holds the card, for one who may steer
  expect(await p.run(`document.querySelector("#take").disabled`)).toBe(true);
  const queued = postJson(`${t.ollamaUrl}/turnstile/lease`, { holder: "trainer", ttl: "5m" });
  await shown("#lease", "trainer waits for the card", "the queued lease in the lease card");
  expect(await text("#waiting")).toContain("lease trainer");
  expect(await text("#image")).toContain("none running");
  await shots(p, "4-lease");
  await p.run(`window.confirm = () => true; document.querySelector("#release").click()`);
  await shown("#steer-msg", "1 waiting lease(s) ended", "the release's answer, naming the waiting lease");
  expect(await text("#steer-msg")).toContain("lease revoked");
  expect((await queued).status).toBe(409);
  await shown("#state", "idle", "idle after the release");
  expect(await p.run(`document.querySelector("#take").disabled`)).toBe(false);

  // The server gone: everything live greys out, the buttons go dead, and the page says since when.
  const ports = { ollama: new URL(t.ollamaUrl).port, comfy: new URL(t.comfyUrl).port };
  await t.close();
  await until(async () => (await p.run(`document.body.classList.contains("stale")`)) === true, "the page greyed out", 10_000);
  expect(await text("#conn")).toMatch(/^connection lost since .+ ago\); reconnecting…$/);
  expect(await p.run(`[...document.querySelectorAll("#steer button")].filter((b) => !b.hidden).every((b) => b.disabled)`)).toBe(true);
  expect(await p.run(`getComputedStyle(document.querySelector("#state").parentElement).opacity`)).toBe("0.4");
  await shots(p, "5-server-gone");

  // The server back on the same port: live again, with the new instance's state.
  again = startTestTurnstile({
    OLLAMA_URL: stack.ollama!.url,
    COMFY_URL: stack.comfy!.url,
    LISTEN_OLLAMA: `127.0.0.1:${ports.ollama}`,
    LISTEN_COMFY: `127.0.0.1:${ports.comfy}`,
  });
  await until(async () => (await text("#conn")) === "live", "the page live again", 15_000);
  expect(await p.run(`document.body.classList.contains("stale")`)).toBe(false);
  expect(await p.run(`document.querySelector("#take").disabled`)).toBe(false);
  await shots(p, "6-server-back");

  // A place in line (issue 30; fair turns are on by default in the new instance): two clients'
  // jobs wait behind a lease, in fair turns, each with its position and estimate; the line moves
  // on the page, with no reload, when the lease ends.
  expect(await p.run(`document.querySelector("#line-card").hidden`)).toBe(false);
  expect(await text("#line")).toBe("nothing waits");
  const lease = (await (await postJson(`${again.ollamaUrl}/turnstile/lease`, { holder: "line test", ttl: "5m" })).json()) as { id: string };
  const fromClient = (client: string) => submit(again!, JSON.stringify({ ...JSON.parse(promptBody(newPromptId())), client_id: client }));
  const inLine = [fromClient("alice-tab"), fromClient("alice-tab")];
  await until(() => again!.status.snapshot(false).image.waiting === 2, "alice's two jobs waiting", 10_000);
  inLine.push(fromClient("bob-tab"));
  await until(() => again!.status.snapshot(false).image.waiting === 3, "bob's job waiting", 10_000);
  // A chat waits too: its place is its LLM turn, after the three image jobs.
  inLine.push(postJson(`${again.ollamaUrl}/api/chat`, { model: "llama3.2", stream: false, messages: [{ role: "user", content: "hi" }] }));
  type Row = [client: string, cls: string, what: string, position: string, estimate: string];
  const rows = () => p.run(`[...document.querySelectorAll("#line tr")].slice(1).map((r) => [...r.cells].map((c) => c.textContent))`) as Promise<Row[]>;
  await until(async () => (await rows()).length === 4, "three jobs and a chat in the line on the page", 10_000);
  const [a1, a2, b1, c1] = await rows();
  // Grouped by client; bob's single job is second, ahead of alice's second.
  expect([a1![0], a2![0], a1![3], a2![3], b1![3]]).toEqual([a1![0], a1![0], "1", "3", "2"]);
  expect(b1![0]).toMatch(/^comfy-[0-9a-f]{8}$/);
  expect(b1![0]).not.toBe(a1![0]);
  expect(a1![4]).toMatch(/^~\d+ s$/);
  expect([c1![0], c1![2], c1![3]]).toEqual(["127.0.0.1", c1![2], "4"]);
  expect(c1![2]).toMatch(/^chat \d+$/);
  await shots(p, "7-place-in-line");
  await fetch(`${again.ollamaUrl}/turnstile/lease/${lease.id}`, { method: "DELETE" });
  // Alice's first and bob's go to ComfyUI; her second waits for her first and is next, the chat after it.
  await until(async () => {
    const r = await rows();
    return r.length === 2 && r[0]![2] === a2![2] && r[0]![3] === "1" && r[1]![2] === c1![2] && r[1]![3] === "2";
  }, "alice's second job moved up to position 1, the chat to 2", 10_000);
  await Promise.all(inLine.map(async (j) => (await j).text()));
  await until(async () => (await text("#line")) === "nothing waits", "the line empty again", 10_000);
}, 90_000);
