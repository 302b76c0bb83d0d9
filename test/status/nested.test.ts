/** The status lists a nested LLM request under the image job that runs it, not among the LLM requests. */
import { expect, test } from "bun:test";
import { renderStatus } from "../../src/cli/status.ts";
import { StatusModel } from "../../src/status/model.ts";

test("a nested request is listed under the running job, and falls back to the LLM list without one", () => {
  let t = 1000;
  const status = new StatusModel({
    version: "test",
    upstreams: [],
    now: () => t,
  });
  const r = status.start("/api/generate", "127.0.0.1");
  status.nested(r);
  status.named(r, "llama3.2");
  expect(status.snapshot(false).llm.requests.map((x) => x.path)).toEqual(["/api/generate"]);
  status.onJob({ phase: "acquired", jobId: 7, waitedMs: 0, joined: false });
  status.onJob({ phase: "forwarded", jobId: 7, status: 200, promptId: "p-7", durationMs: 1 });
  t = 1500;
  const doc = status.snapshot(true);
  expect(doc.llm.requests).toEqual([]);
  expect(doc.image.running?.nested).toEqual([{ id: r.id, path: "/api/generate", model: "llama3.2", client: "127.0.0.1", age_ms: 500, waiting: false, since: 1000 }]);
  // `gpu-turnstile status` shows it under its job too.
  const lines = renderStatus(doc).split("\n");
  const jobAt = lines.findIndex((l) => l.startsWith("image: job 7"));
  expect(jobAt).toBeGreaterThanOrEqual(0);
  expect(lines[jobAt + 1]).toBe("  nested /api/generate llama3.2 from 127.0.0.1 500ms");
  status.end(r);
  expect(status.snapshot(false).image.running?.nested).toBeUndefined();
});
