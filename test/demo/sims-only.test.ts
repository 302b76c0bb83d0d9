/**
 * Issue 28 point 11: the demo points at what it shows. `demo --sims-only` runs the simulators
 * alone for a turnstile started by hand, and says how; the lines printed can be pasted as they are.
 */
import { expect, test } from "bun:test";
import { thisProgram, watchLines } from "../../src/demo/pointers.ts";
import { runSimsOnly } from "../../src/demo/sims-only.ts";
import { normalizeArgv } from "../../src/cli/argv.ts";

test("demo --sims-only: the simulated Ollama and ComfyUI answer at the URLs it prints, with the command that puts a turnstile in front", async () => {
  let out = "";
  let stop!: () => void;
  const stopped = new Promise<void>((r) => (stop = r));
  const running = runSimsOnly({ out: (s) => (out += s), color: false, until: stopped });
  const deadline = Date.now() + 10_000;
  while (!out.includes("Ctrl-C stops") && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
  const ollama = /simulated Ollama: +(http:\/\/127\.0\.0\.1:\d+)\n/.exec(out)?.[1];
  const comfy = /simulated ComfyUI: +(http:\/\/127\.0\.0\.1:\d+)\n/.exec(out)?.[1];
  expect(ollama).toBeDefined();
  expect(comfy).toBeDefined();
  expect(((await (await fetch(`${ollama}/api/version`)).json()) as { version: string }).version).toBeString();
  expect((await fetch(`${comfy}/system_stats`)).status).toBe(200);
  expect(out).toContain(`OLLAMA_URL=${ollama} COMFY_URL=${comfy} LISTEN_OLLAMA=127.0.0.1:11434 LISTEN_COMFY=127.0.0.1:8188 `);
  expect(out).toContain("status page:   http://127.0.0.1:11434/turnstile/\n");
  expect(out).toMatch(/in a terminal: .+ status --watch --url http:\/\/127\.0\.0\.1:11434\n/);
  stop();
  expect(await running).toBe(0);
  // Stopped: nothing listens there any more.
  expect(await fetch(`${ollama}/api/version`).then(() => "answered", () => "gone")).toBe("gone");
});

test("the flag is one the command line takes", () => {
  expect(() => normalizeArgv(["demo", "--sims-only"])).not.toThrow();
});

test("this program as a shell runs it again: the executable when compiled, npx bun and the script from a checkout", () => {
  expect(thisProgram(["/opt/gt/gpu-turnstile", "/$bunfs/root/gpu-turnstile", "demo"], "/opt/gt/gpu-turnstile", "/home/me")).toBe("/opt/gt/gpu-turnstile");
  expect(thisProgram(["bun", "/src/gt/src/main.ts", "demo"], "/src/gt/node_modules/bun/bin/bun", "/src/gt")).toBe("npx bun src/main.ts");
  expect(thisProgram(["bun", "/src/gt/src/main.ts", "demo"], "/usr/bin/bun", "/elsewhere")).toBe("npx bun /src/gt/src/main.ts");
  expect(thisProgram(["x", "C:/Program Files/x.exe"], "C:\\Program Files\\gt.exe", "/")).toContain("'");
  expect(watchLines("http://127.0.0.1:9", "gt", "card1")).toEqual(["  status page (card1):   http://127.0.0.1:9/turnstile/", "  in a terminal (card1): gt status --watch --url http://127.0.0.1:9"]);
});
