/**
 * What the status tracking adds to one LLM request, in isolation: the tracker calls the proxy
 * makes (start, body → model, admitted, end) on a typical 1 KiB chat body, with and without a
 * page's event stream subscribed. Run: `npx bun bench/experiments/status-cost.ts`.
 * The budget (issue 13) is 5 µs per small request.
 */
import { GpuLock } from "../../src/lock/index.ts";
import { StatusModel } from "../../src/status/model.ts";
import { modelFieldWatcher } from "../../src/ollama/model-field.ts";

const lock = new GpuLock();
const model = new StatusModel({ version: "bench", upstreams: ["ollama"] });
lock.onEvent((e) => model.onLock(e));
const body = new TextEncoder().encode(
  JSON.stringify({ messages: [{ role: "user", content: "x".repeat(900) }], model: "llama3.2", stream: true }),
);

function round(n: number): number {
  const t0 = performance.now();
  for (let i = 0; i < n; i++) {
    const r = model.start("/api/chat", "127.0.0.1");
    // The proxy reads the model from the buffered body once and names it to the status model.
    modelFieldWatcher((m) => model.named(r, m))(body);
    model.admitted(r);
    model.end(r);
  }
  return ((performance.now() - t0) * 1000) / n;
}

round(100_000); // warm up the JIT
const runs = Array.from({ length: 7 }, () => round(200_000)).sort((a, b) => a - b);
console.log(`status tracking per LLM request: median ${runs[3]!.toFixed(3)} µs (min ${runs[0]!.toFixed(3)}, max ${runs[6]!.toFixed(3)}); budget 5 µs`);
