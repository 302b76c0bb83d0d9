/** The simulated ComfyUI's jobs API, cancel routes and prompt_id rule (api-facts C8, S3). */
import { afterEach, describe, expect, test } from "bun:test";
import { type ComfySim, type ComfySimOptions, startComfySim } from "../../src/sim/comfy.ts";
import { parsePy, type PyDict } from "../../src/sim/pyjson.ts";
import { expectSameShape, fixture, fixtureText, post, waitFor } from "./helpers.ts";

const REQUEST = JSON.parse(fixtureText("comfy-prompt-request.json"));
const ids: string[] = Array.from({ length: 4 }, (_, i) => `0000000${i}-abcd-4000-8000-00000000000a`);

const sims: ComfySim[] = [];
async function start(opts: ComfySimOptions = {}): Promise<ComfySim> {
  const s = await startComfySim({ jobMs: 40, freeDelayMs: 10, ...opts });
  sims.push(s);
  return s;
}
afterEach(async () => {
  await Promise.all(sims.splice(0).map((s) => s.stop()));
});

function submit(s: ComfySim, promptId: string | undefined, extra: Record<string, unknown> = {}): Promise<Response> {
  return post(`${s.url}/prompt`, { ...REQUEST, prompt_id: promptId, ...extra });
}
async function getJson(url: string): Promise<{ status: number; body: unknown; text: string }> {
  const res = await fetch(url);
  const text = await res.text();
  return { status: res.status, text, body: res.headers.get("content-type")?.startsWith("application/json") ? JSON.parse(text) : undefined };
}
async function jobStatus(s: ComfySim, id: string): Promise<string | undefined> {
  const { status, body } = await getJson(`${s.url}/api/jobs/${id}`);
  return status === 200 ? (body as { status: string }).status : undefined;
}

describe("simulated ComfyUI: jobs API", () => {
  test("one job goes pending, in_progress, completed; the listing has the fixture's shape", async () => {
    const s = await start({ jobMs: 300 });
    await submit(s, ids[0]);
    await submit(s, ids[1]);
    expect(await jobStatus(s, ids[1]!)).toBe("pending");
    await waitFor(async () => (await jobStatus(s, ids[0]!)) === "in_progress", "in_progress");
    await waitFor(async () => (await jobStatus(s, ids[1]!)) === "completed", "completed", 5000);
    const list = parsePy(await (await fetch(`${s.url}/api/jobs`)).text()) as PyDict;
    const want = fixture("comfy-jobs.json") as PyDict;
    // Newest first, as the fixture lists them; both completed jobs have the fixture's completed shape.
    expectSameShape((list.get("jobs") as PyDict[])[0]!, (want.get("jobs") as PyDict[])[1]!);
    expectSameShape(list.get("pagination")!, want.get("pagination")!);
    expect(JSON.parse(await (await fetch(`${s.url}/api/jobs`)).text()).jobs.map((j: { id: string }) => j.id)).toEqual([ids[1], ids[0]]);
  });

  test("a pending job has the fixture's pending shape", async () => {
    const s = await start({ jobMs: 2000 });
    await submit(s, ids[0]);
    await submit(s, ids[1]);
    const one = parsePy((await getJson(`${s.url}/api/jobs/${ids[1]}`)).text) as PyDict;
    expectSameShape(one, ((fixture("comfy-jobs.json") as PyDict).get("jobs") as PyDict[])[0]!);
  });

  test("status filter and pagination", async () => {
    const s = await start({ jobMs: 2000 });
    for (const id of ids) await submit(s, id);
    await waitFor(() => s.runningJob(), "running");
    const page = (q: string) => getJson(`${s.url}/api/jobs?${q}`).then((r) => r.body as { jobs: { id: string; status: string }[]; pagination: Record<string, unknown> });
    const pending = await page("status=pending");
    expect(pending.jobs.map((j) => j.status)).toEqual(["pending", "pending", "pending"]);
    expect(pending.pagination).toEqual({ offset: 0, limit: null, total: 3, has_more: false });
    const both = await page("status=pending,in_progress&sort_order=asc&limit=2&offset=1");
    expect(both.jobs.map((j) => j.id)).toEqual(ids.slice(1, 3));
    expect(both.pagination).toEqual({ offset: 1, limit: 2, total: 4, has_more: true });
    expect((await getJson(`${s.url}/api/jobs?status=bogus`)).status).toBe(400);
  });

  test("an unknown id is 404 Job not found; there is no /jobs alias", async () => {
    const s = await start();
    const res = await getJson(`${s.url}/api/jobs/${ids[3]}`);
    expect([res.status, res.body]).toEqual([404, { error: "Job not found" }]);
    const alias = await getJson(`${s.url}/jobs/${ids[3]}`);
    expect([alias.status, alias.text]).toEqual([404, "404: Not Found"]);
  });

  test("cancel: a running job ends cancelled, a pending one leaves the queue; unknown ids are not cancelled", async () => {
    const s = await start({ jobMs: 5000 });
    for (const id of ids.slice(0, 3)) await submit(s, id);
    await waitFor(() => s.runningJob(), "running");
    const one = await post(`${s.url}/api/jobs/${ids[0]}/cancel`, "");
    expect(await one.json()).toEqual({ cancelled: true });
    const many = await post(`${s.url}/api/jobs/cancel`, { job_ids: [ids[1] as string, ids[3] as string] });
    expect(await many.json()).toEqual({ cancelled: true });
    await waitFor(async () => (await jobStatus(s, ids[0]!)) === "cancelled", "cancelled");
    expect((await getJson(`${s.url}/api/jobs/${ids[1]}`)).status).toBe(404);
    expect(await (await post(`${s.url}/api/jobs/${ids[3]}/cancel`, "")).json()).toEqual({ cancelled: false });
    expect((await post(`${s.url}/api/jobs/cancel`, { job_ids: "x" })).status).toBe(400);
  });

  test("a failed job is failed", async () => {
    const s = await start();
    await submit(s, ids[0], { extra_data: { sim_fail: true } });
    await waitFor(async () => (await jobStatus(s, ids[0]!)) === "failed", "failed");
  });

  test("legacy (v0.3.64): no jobs API, the route itself is aiohttp's 404", async () => {
    const s = await start({ legacy: true });
    const res = await getJson(`${s.url}/api/jobs/${ids[0]}`);
    expect([res.status, res.text]).toEqual([404, "404: Not Found"]);
    expect((await submit(s, "any string")).status).toBe(200);
  });
});

describe("simulated ComfyUI: client-chosen prompt_id (S3)", () => {
  test("anything but a canonical lowercase UUID is 400 invalid_prompt_id, and nothing is queued", async () => {
    const s = await start();
    for (const bad of ["", "job", "x".repeat(70_000), ids[0]!.toUpperCase(), `{${ids[0]}}`, 12]) {
      const res = await submit(s, bad as string);
      expect(res.status).toBe(400);
      const body = (await res.json()) as { error: { type: string }; node_errors: unknown };
      expect(body.error.type).toBe("invalid_prompt_id");
      expect(body.node_errors).toEqual({});
    }
    expect(s.jobs()).toEqual([]);
    expect((await submit(s, ids[0])).status).toBe(200);
  });
});

describe("simulated ComfyUI: who hears what on the websocket (S3)", () => {
  test("a third party hears status and execution_interrupted, none of the job's own events", async () => {
    const s = await start({ jobMs: 3000 });
    const ws = new WebSocket(`${s.url.replace("http", "ws")}/ws?clientId=bystander`);
    const seen: string[] = [];
    ws.onmessage = (e) => seen.push(JSON.parse(e.data as string).type);
    await new Promise((r) => (ws.onopen = r));
    await submit(s, ids[0], { client_id: "submitter" });
    await waitFor(() => s.runningJob(), "running");
    await post(`${s.url}/interrupt`, { prompt_id: ids[0] });
    await waitFor(() => seen.includes("execution_interrupted"), "execution_interrupted");
    ws.close();
    expect(new Set(seen)).toEqual(new Set(["status", "execution_interrupted"]));
  });
});
