/**
 * The README's "run it" command: `gpu-turnstile demo --once` runs the scripted workload to its
 * summary and reports 0 GPU overlaps; the same workload without the turnstile reports overlaps —
 * so the first result means something.
 */
import { expect, test } from "bun:test";

const MAIN = new URL("../../src/main.ts", import.meta.url).pathname;

function withoutColorVars(env: Record<string, string | undefined>): Record<string, string | undefined> {
  const { NO_COLOR: _n, FORCE_COLOR: _f, ...rest } = env;
  return rest;
}

async function demo(...flags: string[]): Promise<{ code: number; out: string }> {
  const p = Bun.spawn([process.execPath, MAIN, "demo", "--once", ...flags], {
    stdout: "pipe",
    stderr: "pipe",
    // Output to a pipe is plain without being asked: no NO_COLOR here, and none inherited.
    env: { ...withoutColorVars(process.env), BUN_CONFIG_MAX_HTTP_REQUESTS: "65535" },
  });
  const [out, err, code] = await Promise.all([new Response(p.stdout).text(), new Response(p.stderr).text(), p.exited]);
  return { code, out: out + err };
}

test(
  "demo --once: every image made, chats answered, the impatient client gave up, 0 overlaps; without the turnstile: overlaps",
  async () => {
    const [withT, without] = await Promise.all([demo(), demo("--without-turnstile")]);

    expect(withT.code).toBe(0);
    expect(withT.out).toContain("summary (with the turnstile)");
    expect(withT.out).toMatch(/images generated:\s+6 of 6/);
    // The burst shares one session: one cold checkpoint load, one /free.
    expect(withT.out).toMatch(/checkpoint loads:\s+1, \/free calls: 1\n/);
    expect(withT.out).toMatch(/makespan:\s+\d+\.\d\ds\n/);
    expect(withT.out).toMatch(/longest LLM wait:\s+\d+\.\d\ds until the first token/);
    expect(withT.out).toMatch(/chats answered:\s+3 of 4, 1 client gave up while waiting/);
    expect(withT.out).toMatch(/GPU overlaps: 0\n/);
    expect(withT.out).toContain("VRAM oversubscribed:  0 time(s)");
    // The timeline shows the phases an operator cares about.
    expect(withT.out).toMatch(/image job 1 +Ollama emptied/);
    // The images share one session: the others join it, and the last one out frees ComfyUI.
    expect(withT.out.match(/image job \d +joined the image session/g)).toHaveLength(5);
    // The prompt-enhancer's call was served mid-job on the nested listener, and said so apart from the overlaps.
    expect(withT.out).toMatch(/nested LLM calls:\s+1 served during image jobs, sharing the card by the operator's choice \(1 such overlap\(s\)\)\n/);
    expect(withT.out).toContain("shared by choice: the prompt-enhancer's llama3.2:latest loads beside the image job");
    expect(withT.out).not.toContain("OVERLAP:");
    expect(withT.out.match(/image job \d +ComfyUI freed its VRAM/g)).toHaveLength(1);
    expect(withT.out).not.toContain("\x1b[");
    // It points at what shows the card live: the status page and `status`.
    const page = /status page: +(http:\/\/127\.0\.0\.1:\d+)\/turnstile\/\n/.exec(withT.out)?.[1];
    expect(page).toBeDefined();
    expect(withT.out).toMatch(new RegExp(`in a terminal: .+ status --watch --url ${page!.replaceAll(".", "\\.")}\n`));

    expect(without.code).toBe(0);
    expect(without.out).toContain("summary (WITHOUT the turnstile)");
    expect(without.out).not.toContain("status page");
    const n = Number(/GPU overlaps: (\d+)/.exec(without.out)?.[1]);
    expect(n).toBeGreaterThan(0);
  },
  60_000,
);
