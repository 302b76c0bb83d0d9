/**
 * Issue 26 point 8: a model skips the GPU lock only when Ollama itself says it is remote
 * (`remote_host` / `remote_model` in /api/show). Names that only look like cloud models — a local
 * model copied to `llama3.2:8b-cloud`, `x:CLOUD`, `ollama.com/library/x:cloud`, stray whitespace —
 * are held like any local model during an image job; so is a cloud name while Ollama cannot be asked.
 */
import { describe, expect, test } from "bun:test";
import { arrivedAt, lastFreeAt, postJson, probedStackForFile, startImageJob, until } from "./helpers.ts";

const s = probedStackForFile();
const CHAT = [{ role: "user", content: "hi" }];
const TAG = "x-e2e-lookalike";

const freeAt = () => lastFreeAt(s());
const arrived = (tag: string) => arrivedAt(s(), TAG, tag);

const chat = (model: string, tag: string) => postJson(`${s().t.ollamaUrl}/api/chat`, { model, messages: CHAT, stream: false }, { [TAG]: tag });

async function cp(source: string, destination: string, via = s().t.ollamaUrl): Promise<void> {
  const res = await postJson(`${via}/api/copy`, { source, destination });
  expect(res.status).toBe(200);
}

describe("during an image job", () => {
  test("local models under cloud-looking names wait for /free; a real cloud model passes at once", async () => {
    for (const name of ["llama3.2:8b-cloud", "x:cloud", "ollama.com/library/x:cloud"]) await cp("llama3.2", name);
    // Ollama's own word for the real one, in both of its answers.
    const tags = (await (await fetch(`${s().t.ollamaUrl}/api/tags`)).json()) as { models: { name: string; remote_host?: string }[] };
    expect(tags.models.find((m) => m.name === "llama3.2:8b-cloud")?.remote_host).toBeUndefined();

    await startImageJob(s().t, 500);
    const passing = await chat("gpt-oss:120b-cloud", "cloud");
    expect({ status: passing.status, lock: s().t.lock.state }).toEqual({ status: 200, lock: "image" });

    const held = ["llama3.2:8b-cloud", "llama3.2:8B-CLOUD", " llama3.2:8b-cloud\n", "x:CLOUD", "ollama.com/library/x:cloud"];
    const waiting = held.map(async (model, i) => (await chat(model, `held ${i}`)).status);
    await until(() => s().t.lock.snapshot().llmWaiting === held.length, "the look-alikes waiting at the lock");
    expect(await Promise.all(waiting)).toEqual(held.map(() => 200));

    const at = await freeAt();
    expect(arrived("cloud")).toBeLessThan(at);
    for (const [i, model] of held.entries()) expect({ model, afterFree: arrived(`held ${i}`) >= at }).toEqual({ model, afterFree: true });
    expect(s().pair.gpu.overlaps()).toEqual([]);
  });

  test("a cloud model re-created locally under its name (ollama cp through the turnstile) is held from then on", async () => {
    await startImageJob(s().t, 400);
    expect((await chat("gpt-oss:20b-cloud", "before cp")).status).toBe(200);
    expect(s().t.lock.state).toBe("image");
    await cp("llama3.2", "gpt-oss:20b-cloud");
    const after = chat("gpt-oss:20b-cloud", "after cp");
    await until(() => s().t.lock.snapshot().llmWaiting === 1, "the re-created model waiting at the lock");
    expect((await after).status).toBe(200);
    const at = await freeAt();
    expect(arrived("before cp")).toBeLessThan(at);
    expect(arrived("after cp")).toBeGreaterThanOrEqual(at);
    expect(s().pair.gpu.overlaps()).toEqual([]);
  });

  test("while Ollama cannot say (its /api/show fails), a cloud name is held like a local model", async () => {
    const restore = s().pair.ollama.override("POST", "/api/show", () => Response.json({ error: "boom" }, { status: 500 }));
    try {
      await startImageJob(s().t, 300);
      const res = chat("kimi-k2:1t-cloud", "unasked");
      await until(() => s().t.lock.snapshot().llmWaiting === 1, "the unconfirmed cloud chat waiting at the lock");
      expect((await res).status).toBe(200);
      expect(arrived("unasked")).toBeGreaterThanOrEqual(await freeAt());
    } finally {
      restore();
    }
    expect(s().pair.gpu.overlaps()).toEqual([]);
  });
});
