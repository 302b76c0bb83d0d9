/**
 * `gpu-turnstile demo --image a1111` and `--image swarmui` (with the default Ollama): every chat
 * and image served, 0 overlaps on the demo's card behind the real turnstile.
 */
import { expect, test } from "bun:test";

const MAIN = new URL("../../src/main.ts", import.meta.url).pathname;

async function demo(...flags: string[]): Promise<{ code: number; out: string }> {
  const p = Bun.spawn([process.execPath, MAIN, "demo", "--once", ...flags], { stdout: "pipe", stderr: "pipe" });
  const [out, err, code] = await Promise.all([new Response(p.stdout).text(), new Response(p.stderr).text(), p.exited]);
  return { code, out: out + err };
}

test(
  "demo --image a1111 and --image swarmui: 3 chats, 3 images, 0 overlaps",
  async () => {
    const [a1111, swarm] = await Promise.all([demo("--image", "a1111"), demo("--image", "swarmui")]);
    for (const [kind, label, r] of [["a1111", "AUTOMATIC1111", a1111], ["swarmui", "SwarmUI", swarm]] as const) {
      expect({ kind, code: r.code }).toEqual({ kind, code: 0 });
      expect(r.out).toContain(`LLM_KIND=ollama, IMAGE_KIND=${kind}`);
      expect(r.out).toContain(`asks ${label} for an image`);
      expect(r.out).toMatch(/chats answered:\s+3 of 3/);
      expect(r.out).toMatch(/images generated:\s+3 of 3/);
      expect(r.out).toMatch(/GPU overlaps: 0\n/);
    }
  },
  60_000,
);
