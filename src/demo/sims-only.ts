/**
 * `gpu-turnstile demo --sims-only`: the demo's simulated Ollama and ComfyUI on one simulated
 * 16 GiB card, and nothing else — no turnstile, no workload. For trying the status page, `status`
 * and a real client against a turnstile run by hand, without Ollama, ComfyUI or a GPU. It prints
 * the command that puts a turnstile in front of them and stays up until Ctrl-C.
 */
import { useColor } from "../runtime/color.ts";
import { VERSION } from "../version.ts";
import { thisProgram, watchLines } from "./pointers.ts";
import { startDemoSims, VRAM } from "./run.ts";
import { untilStopped } from "./stop.ts";
import { gib, Timeline } from "./timeline.ts";

export interface SimsOnlyOptions {
  out?: (s: string) => void;
  color?: boolean;
  /** Resolves when the simulators should stop (default: Ctrl-C, SIGTERM, SIGHUP). */
  until?: Promise<unknown>;
}

export async function runSimsOnly(opts: SimsOnlyOptions = {}): Promise<number> {
  const out = opts.out ?? ((s: string) => void process.stdout.write(s));
  const tl = new Timeline(out, opts.color ?? useColor(process.stdout));
  const sims = await startDemoSims();
  const program = thisProgram();
  // The turnstile's own default ports (11434, 8188) stay free for the one started by hand.
  const listen = { ollama: "127.0.0.1:11434", comfy: "127.0.0.1:8188" };
  tl.text(`gpu-turnstile ${VERSION} — simulators only, on one simulated ${gib(VRAM)} GPU (no turnstile)`, "gpu");
  tl.text(`  simulated Ollama:  ${sims.ollama.url}`);
  tl.text(`  simulated ComfyUI: ${sims.comfy.url}`);
  tl.text("");
  tl.text("put a turnstile in front of them (another terminal):", "gpu");
  tl.text(`  OLLAMA_URL=${sims.ollama.url} COMFY_URL=${sims.comfy.url} LISTEN_OLLAMA=${listen.ollama} LISTEN_COMFY=${listen.comfy} ${program} run`);
  tl.text("then watch the card, and give it work:", "gpu");
  for (const l of watchLines(`http://${listen.ollama}`, program)) tl.text(l);
  tl.text(`  curl -N http://${listen.ollama}/api/chat -d '{"model":"llama3.2","messages":[{"role":"user","content":"hi"}]}'`);
  tl.text("");
  tl.text("Ctrl-C stops the simulators", "dim");
  await (opts.until ?? untilStopped());
  await sims.stop();
  return 0;
}
