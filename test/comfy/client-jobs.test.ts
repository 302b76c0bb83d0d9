/** ComfyClient's jobs API reads against the simulated ComfyUI, today's and v0.3.64 (no jobs API). */
import { afterEach, describe, expect, test } from "bun:test";
import { ComfyClient, type JobSummary } from "../../src/comfy/client.ts";
import { type ComfySim, type ComfySimOptions, startComfySim } from "../../src/sim/comfy.ts";
import { fixtureText, post, waitFor } from "../sim/helpers.ts";

const REQUEST = JSON.parse(fixtureText("comfy-prompt-request.json"));
const A = "0a000000-abcd-4000-8000-00000000000a";
const B = "0b000000-abcd-4000-8000-00000000000b";

const sims: ComfySim[] = [];
async function start(opts: ComfySimOptions = {}): Promise<{ sim: ComfySim; client: ComfyClient }> {
  const sim = await startComfySim({ jobMs: 40, freeDelayMs: 10, ...opts });
  sims.push(sim);
  return { sim, client: new ComfyClient(new URL(sim.url), 2000) };
}
afterEach(async () => {
  await Promise.all(sims.splice(0).map((s) => s.stop()));
});

describe("ComfyClient: the jobs API", () => {
  test("job() follows one prompt from pending to completed; an unknown id is unknown, not unsupported", async () => {
    const { sim, client } = await start({ jobMs: 300 });
    expect(await client.job(A)).toBe("unknown");
    await post(`${sim.url}/prompt`, { ...REQUEST, prompt_id: A });
    await post(`${sim.url}/prompt`, { ...REQUEST, prompt_id: B });
    expect(await client.job(B)).toBe("pending");
    await waitFor(async () => (await client.job(A)) === "in_progress", "in_progress");
    await waitFor(async () => (await client.job(B)) === "completed", "completed");
  });

  test("jobs() lists by status", async () => {
    const { sim, client } = await start({ jobMs: 3000 });
    await post(`${sim.url}/prompt`, { ...REQUEST, prompt_id: A });
    await post(`${sim.url}/prompt`, { ...REQUEST, prompt_id: B });
    await waitFor(() => sim.runningJob(), "running");
    // With ComfyUI's number (`priority`) and, once running, its start (`execution_start_time`).
    const startedAt = sim.runningJob()!.startedAt!;
    const [running] = (await client.jobs(["in_progress"])) as JobSummary[];
    expect(running).toMatchObject({ id: A, status: "in_progress", number: 0 });
    expect(Math.abs(running!.startedAt! - startedAt)).toBeLessThan(50);
    expect(await client.jobs(["pending", "in_progress"])).toEqual([
      { id: B, status: "pending", number: 1 },
      { id: A, status: "in_progress", number: 0, startedAt: running!.startedAt },
    ]);
  });

  test("a cancelled running job reads cancelled", async () => {
    const { sim, client } = await start({ jobMs: 3000 });
    await post(`${sim.url}/prompt`, { ...REQUEST, prompt_id: A });
    await waitFor(() => sim.runningJob(), "running");
    await post(`${sim.url}/api/jobs/${A}/cancel`, "");
    await waitFor(async () => (await client.job(A)) === "cancelled", "cancelled");
  });

  test("an old ComfyUI without the jobs API is unsupported, on both reads", async () => {
    const { client } = await start({ legacy: true });
    expect(await client.job(A)).toBe("unsupported");
    expect(await client.jobs(["pending"])).toBe("unsupported");
  });

  test("a 404 page that is not ComfyUI's JSON means the route is missing; other failures throw", async () => {
    const { sim, client } = await start();
    sim.override("GET", `/api/jobs/${A}`, () => new Response("<html>Not Found</html>", { status: 404, headers: { "content-type": "text/html" } }));
    expect(await client.job(A)).toBe("unsupported");
    sim.override("GET", `/api/jobs/${B}`, () => new Response("oops", { status: 500 }));
    await expect(client.job(B)).rejects.toThrow("HTTP 500");
  });
});
