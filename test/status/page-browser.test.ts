/**
 * The status page in a real browser (Debian's `chromium`, driven over the DevTools protocol):
 * it shows an image job while it runs and goes back to idle, live from /turnstile/events.
 * Saves a screenshot of the running job: to the temp directory, or with UPDATE_SCREENSHOT=1 to
 * docs/status-page.png (the README's; a run would otherwise leave that file changed every time).
 * Skips with a note where chromium is missing.
 */
import { afterEach, expect, test } from "bun:test";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { newPromptId, postJson, promptBody, startStack, submit, until, type Stack } from "../e2e/jobs/helpers.ts";

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
    async screenshot(path: string) {
      const r = await send("Page.captureScreenshot", { format: "png" });
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
afterEach(async () => {
  await page?.close();
  await stack?.stop();
  page = undefined;
  stack = undefined;
});

test.skipIf(!haveChromium)("the page shows an image job while it runs, then idle again", async () => {
  stack = await startStack({ ollama: { tokenDelayMs: 40, tokens: 10 }, comfy: { jobMs: 1500, freeDelayMs: 50 } });
  const { t } = stack;
  page = await openPage(`${t.comfyUrl}/turnstile/`);
  await until(async () => (await page!.text("#state")) === "idle", "the page showing idle", 15_000);
  expect(await page.text("#conn")).toBe("live");

  // A chat and a short image job first, so the strip and the recent list have something in them.
  const chat = (model: string) => postJson(`${t.ollamaUrl}/api/chat`, { model, stream: false, messages: [{ role: "user", content: "hi" }] });
  await (await chat("llama3.2")).text();
  const p0 = newPromptId();
  await (await submit(t, promptBody(p0, { sim_job_ms: 200 }))).text();
  await until(async () => (await page!.text("#recent")).includes(p0), "the first job in the recent list", 10_000);

  const p1 = newPromptId();
  const job = submit(t, promptBody(p1));
  await until(async () => (await page!.text("#phase")) === "running", "the page showing the job running", 10_000);
  expect(await page.text("#state")).toBe("image");
  expect(await page.text("#image")).toContain(p1);
  expect(await page.text("#upstreams")).toContain("up");
  // A chat arriving now waits for the image job, and the page says so.
  const waiting = chat("qwen2.5:7b");
  await until(async () => (await page!.text("#llm")).includes("waits"), "the page showing the waiting chat", 10_000);
  expect(await page.text("#llm")).toContain("qwen2.5:7b");
  const shot = process.env.UPDATE_SCREENSHOT === "1" ? new URL("../../docs/status-page.png", import.meta.url).pathname : join(tmpdir(), "gpu-turnstile-status-page.png");
  await page.screenshot(shot);
  expect(readFileSync(shot).subarray(1, 4).toString()).toBe("PNG");

  await (await job).text();
  await (await waiting).text();
  await until(async () => (await page!.text("#state")) === "idle", "the page back to idle", 10_000);
  await until(async () => (await page!.text("#recent")).includes(p1), "the job in the recent list", 10_000);
  expect(await page.text("#recent")).toContain("completed");
  expect(await page.text("#image")).toContain("none running");
}, 40_000);

test.skipIf(!haveChromium)("from loopback the page offers steering: a lease taken on the page shows, force-release ends it", async () => {
  stack = await startStack();
  const { t } = stack;
  page = await openPage(`${t.ollamaUrl}/turnstile/`);
  await until(async () => (await page!.run(`document.querySelector("#steer").hidden === false`)) === true, "the steering controls shown", 15_000);
  await page.run(`document.querySelector("#holder").value = "browser test"; document.querySelector("#lease-form").requestSubmit()`);
  await until(async () => (await page!.text("#state")) === "lease", "the page showing the lease", 10_000);
  expect(t.lock.state).toBe("lease");
  await until(async () => (await page!.text("#lease")).includes("browser test"), "the lease card", 10_000);
  // "taken here" comes with the lease request's own answer, which the event stream may beat.
  await until(async () => (await page!.text("#lease")).includes("taken here"), "the lease marked as taken here", 10_000);
  await page.run(`window.confirm = () => true; document.querySelector("#release").click()`);
  await until(async () => (await page!.text("#state")) === "idle", "the page back to idle", 10_000);
  expect(t.lock.state).toBe("idle");
  // The event stream may tell the page "idle" before the release's own answer is shown.
  await until(async () => (await page!.text("#steer-msg")).includes("lease revoked"), "the release's answer shown", 10_000);
}, 40_000);
