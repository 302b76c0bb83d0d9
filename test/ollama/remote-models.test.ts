/** Ollama's word on cloud-looking models, kept bounded (issue 26 point 8); a fake /api/show and clock. */
import { describe, expect, test } from "bun:test";
import { changesModels, REMOTE_CHECKS_AT_ONCE, REMOTE_MODEL_TTL_MS, REMOTE_MODELS_KEPT, RemoteModels, remoteInShow } from "../../src/ollama/remote-models.ts";

function setup(answer: (name: string) => boolean | undefined | Promise<boolean | undefined> = () => true) {
  let now = 0;
  const asked: string[] = [];
  const lines: string[] = [];
  const r = new RemoteModels(
    async (name) => {
      asked.push(name);
      return answer(name);
    },
    { warn: (m) => lines.push(`WARN ${m}`), debug: (m) => lines.push(`DEBUG ${m}`) },
    () => now,
  );
  return { r, asked, lines, tick: (ms: number) => (now += ms) };
}

describe("Ollama's answers", () => {
  test("remote only when /api/show names a remote host or model", () => {
    expect(remoteInShow({ remote_model: "gpt-oss:120b", remote_host: "https://ollama.com:443", details: {} })).toBe(true);
    expect(remoteInShow({ remote_host: "https://ollama.com:443" })).toBe(true);
    expect(remoteInShow({ details: { family: "llama" }, modelfile: "FROM llama3.2:8b-cloud" })).toBe(false);
    expect(remoteInShow({ remote_host: "", remote_model: "  " })).toBe(false);
    expect(remoteInShow({ remote_host: 1 })).toBe(false);
    expect(remoteInShow(undefined)).toBe(false);
  });

  test("the routes that may change what a name stands for", () => {
    for (const [m, p] of [["POST", "/api/copy"], ["POST", "/api/create"], ["POST", "/api/pull"], ["DELETE", "/api/delete"]] as const) expect(changesModels(m, p)).toBe(true);
    for (const [m, p] of [["GET", "/api/tags"], ["POST", "/api/show"], ["POST", "/api/push"], ["GET", "/api/copy"]] as const) expect(changesModels(m, p)).toBe(false);
  });
});

describe("kept, bounded", () => {
  test("asked once per name until REMOTE_MODEL_TTL_MS; the exact name is the key", async () => {
    const t = setup((n) => n === "gpt-oss:120b-cloud");
    expect(await t.r.isRemote("gpt-oss:120b-cloud")).toBe(true);
    expect(await t.r.isRemote("gpt-oss:120b-cloud")).toBe(true);
    // Another spelling is another question: one name's answer never stands for another's.
    expect(await t.r.isRemote(" gpt-oss:120b-cloud")).toBe(false);
    expect(t.asked).toEqual(["gpt-oss:120b-cloud", " gpt-oss:120b-cloud"]);
    t.tick(REMOTE_MODEL_TTL_MS);
    await t.r.isRemote("gpt-oss:120b-cloud");
    expect(t.asked).toHaveLength(3);
  });

  test("a copy, create, pull or delete forgets every answer, and one asked meanwhile is not kept", async () => {
    let release!: (v: boolean) => void;
    const t = setup(() => new Promise<boolean>((r) => (release = r)));
    const first = t.r.isRemote("m:cloud");
    // Several askers share one question.
    const second = t.r.isRemote("m:cloud");
    t.r.changed();
    release(true);
    expect([await first, await second]).toEqual([true, true]);
    const again = t.r.isRemote("m:cloud");
    release(false);
    expect(await again).toBe(false);
    expect(t.asked).toEqual(["m:cloud", "m:cloud"]);
    expect(await t.r.isRemote("m:cloud")).toBe(false);
    t.r.changed();
    const third = t.r.isRemote("m:cloud");
    release(true);
    expect(await third).toBe(true);
    expect(t.asked).toHaveLength(3);
  });

  test("while Ollama cannot be asked: held (false), not kept, said once until it answers again", async () => {
    let up = false;
    const t = setup(() => (up ? true : undefined));
    expect(await t.r.isRemote("a:cloud")).toBe(false);
    expect(await t.r.isRemote("b:cloud")).toBe(false);
    expect(t.lines.filter((l) => l.startsWith("WARN"))).toEqual(["WARN could not ask Ollama whether a cloud-looking model is remote; held like a local model until it answers"]);
    up = true;
    expect(await t.r.isRemote("a:cloud")).toBe(true);
    expect(t.asked).toEqual(["a:cloud", "b:cloud", "a:cloud"]);
  });

  test(`at most ${REMOTE_MODELS_KEPT} names kept, the least recently used dropped (logged)`, async () => {
    const t = setup(() => true);
    for (let i = 0; i < REMOTE_MODELS_KEPT; i++) await t.r.isRemote(`m${i}:cloud`);
    await t.r.isRemote("m0:cloud"); // used again: now the newest
    await t.r.isRemote("flood:cloud");
    expect(t.lines.at(-1)).toBe("DEBUG cloud-model answers full; the least recently used is dropped");
    const before = t.asked.length;
    await t.r.isRemote("m0:cloud");
    expect(t.asked.length).toBe(before);
    await t.r.isRemote("m1:cloud");
    expect(t.asked.length).toBe(before + 1);
  });

  test(`at most ${REMOTE_CHECKS_AT_ONCE} questions in flight; past that, held without asking (said once)`, async () => {
    const pending: ((v: boolean) => void)[] = [];
    let slow = true;
    const t = setup(() => (slow ? new Promise<boolean>((r) => pending.push(r)) : true));
    const inFlight = Array.from({ length: REMOTE_CHECKS_AT_ONCE }, (_, i) => t.r.isRemote(`q${i}:cloud`));
    expect(await t.r.isRemote("one-more:cloud")).toBe(false);
    expect(await t.r.isRemote("and-another:cloud")).toBe(false);
    expect(t.asked).toHaveLength(REMOTE_CHECKS_AT_ONCE);
    expect(t.lines.filter((l) => l.startsWith("WARN"))).toHaveLength(1);
    slow = false;
    for (const r of pending) r(true);
    expect(await Promise.all(inFlight)).toEqual(inFlight.map(() => true));
    expect(await t.r.isRemote("one-more:cloud")).toBe(true);
  });
});
