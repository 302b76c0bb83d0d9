/**
 * `gpu-turnstile demo --llm <kind> [--image <kind>]`: another pair of tenant kinds on the demo's
 * card behind the real turnstile ends with every chat and image served and 0 overlaps, and the
 * same workload without the turnstile overlaps (so the 0 means something). An unknown kind is a
 * usage error that lists the kinds.
 */
import { expect, test } from "bun:test";
import { pickPair } from "../../src/demo/pair.ts";

const MAIN = new URL("../../src/main.ts", import.meta.url).pathname;

async function demo(...flags: string[]): Promise<{ code: number; out: string }> {
  const p = Bun.spawn([process.execPath, MAIN, "demo", "--once", ...flags], { stdout: "pipe", stderr: "pipe" });
  const [out, err, code] = await Promise.all([new Response(p.stdout).text(), new Response(p.stderr).text(), p.exited]);
  return { code, out: out + err };
}

test(
  "demo --llm llama-server: 3 chats, 3 images, 0 overlaps; without the turnstile the same pair overlaps",
  async () => {
    const [withT, without] = await Promise.all([demo("--llm", "llama-server"), demo("--llm", "llama-server", "--without-turnstile")]);
    expect(withT.code).toBe(0);
    expect(withT.out).toContain("LLM_KIND=llama-server, IMAGE_KIND=comfyui");
    expect(withT.out).toMatch(/chats answered:\s+3 of 3/);
    expect(withT.out).toMatch(/images generated:\s+3 of 3/);
    expect(withT.out).toMatch(/GPU overlaps: 0\n/);
    expect(without.code).toBe(0);
    expect(without.out).toMatch(/GPU overlaps: [1-9]/);
  },
  60_000,
);

test("an unknown kind names the flag and lists the kinds; the CLI exits 2", async () => {
  expect(pickPair("llamacpp", "comfyui")).toBe("--llm llamacpp: unknown kind (one of ollama, llama-server, llama-swap, lmstudio, vllm)");
  expect(pickPair("vllm", "invoke")).toBe("--image invoke: unknown kind (one of comfyui, a1111, swarmui)");
  expect(pickPair("vllm", "forge")).toEqual({ llm: "vllm", image: "a1111" });
  expect(pickPair("vllm", "comfyui")).toEqual({ llm: "vllm", image: "comfyui" });
  const r = await demo("--llm", "llamacpp");
  expect(r.code).toBe(2);
  expect(r.out).toContain("--llm llamacpp: unknown kind");
});
