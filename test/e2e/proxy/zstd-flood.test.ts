/**
 * zstd bodies of a few hundred bytes that inflate to 20 MiB each (issue 26: 50 of them made /healthz
 * answer 10 s late and the process grow by 700 MiB). Each names a cloud model at its very end, so
 * the turnstile must inflate all of it to decide: it does so a chunk at a time, within one budget
 * shared by all requests, and keeps answering meanwhile.
 */
import { expect, test } from "bun:test";
import { MAX_INFLATED_BYTES } from "../../../src/http/zstd-body.ts";
import { probedStackForFile } from "./helpers.ts";

const s = probedStackForFile();

/** A body of exactly `size` bytes whose model comes last. */
function inflatingBody(size: number, model = "gpt-oss:120b-cloud"): Uint8Array {
  const tail = `","model":"${model}"}`;
  const head = '{"input":"';
  return Bun.zstdCompressSync(head + "a".repeat(size - head.length - tail.length) + tail, { level: 19 });
}

/** The slowest /healthz answer on each listener while `work` runs. */
async function healthzWhile(bases: string[], work: Promise<unknown>): Promise<number> {
  let done = false;
  void work.finally(() => (done = true));
  let worst = 0;
  while (!done) {
    const t0 = performance.now();
    const answers = await Promise.all(bases.map((b) => fetch(`${b}/healthz`).then((r) => r.status)));
    worst = Math.max(worst, performance.now() - t0);
    expect(answers).toEqual(bases.map(() => 200));
    await Bun.sleep(20);
  }
  return worst;
}

test("50 concurrent 20 MiB zstd bodies naming a cloud model: every one is answered, /healthz on both listeners within 1 s throughout", async () => {
  const body = inflatingBody(MAX_INFLATED_BYTES);
  expect(body.length).toBeLessThan(1000);
  const sends = Array.from({ length: 50 }, () =>
    fetch(`${s().t.ollamaUrl}/v1/responses`, { method: "POST", body: body as BodyInit, headers: { "content-type": "application/json", "content-encoding": "zstd" } }).then(async (r) => {
      await r.arrayBuffer();
      return r.status;
    }),
  );
  const all = Promise.all(sends);
  const worst = await healthzWhile([s().t.ollamaUrl, s().t.comfyUrl], all);
  expect(await all).toEqual(sends.map(() => 200));
  expect(worst).toBeLessThan(1000);
  // Read whole, they were cloud requests: none took the GPU.
  expect(s().pair.gpu.overlaps()).toEqual([]);
  expect(s().t.lock.state).toBe("idle");
}, 120_000);
