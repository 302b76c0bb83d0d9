/**
 * A busy answer states its Retry-After twice, in the header and in the message; with
 * BUSY_RETRY_AFTER=auto that value is an estimate that moves, so both must come from one reading.
 */
import { expect, test } from "bun:test";
import { createListenerApp, type RequestObserver } from "../../../src/proxy/app.ts";

const quiet: RequestObserver = { start() {}, end() {}, busy() {}, retry() {}, upstreamFailed() {}, idle() {} };

test("a reject-mode busy answer gives the same Retry-After in its header and its message", async () => {
  let estimate = 7;
  const { proxy } = createListenerApp({
    listener: "ollama",
    upstream: new URL("http://127.0.0.1:9"),
    lock: { tryAcquireLLM: () => null, acquireLLM: () => Promise.reject(new Error("unused")) },
    retry: { backoffInitialMs: 1, backoffMaxMs: 1, retryBodyLimit: 0, max5xxRetries: 0, retryTimeoutMs: 1 },
    busy: {
      mode: "reject",
      waitTimeoutMs: 1000,
      status: 429,
      // Each reading moves on, as an estimate does while a job runs.
      get retryAfterS() {
        return estimate++;
      },
    },
    observer: quiet,
    health: () => ({ state: "image", llm_inflight: 0, image_pending: true, upstreams: { ollama: "up", comfy: "up" } }),
    metrics: () => ({ contentType: "text/plain", text: "" }),
    hostAllowed: () => true,
  });
  const res = await proxy(new Request("http://localhost/api/chat", { method: "POST", headers: { host: "localhost" }, body: '{"model":"m"}' }), "127.0.0.1");
  expect(res.status).toBe(429);
  const header = res.headers.get("retry-after");
  const { error } = (await res.json()) as { error: string };
  expect(error).toContain(`retry in ${header} s`);
});
