/**
 * What the status page shows of the card beyond the lock: Ollama's resident models as `ollama ps`
 * lists them, ComfyUI's memory from /system_stats, and ComfyUI's own word on a job (started,
 * step x of y) from the websocket frames the turnstile relays. Pure parsing of upstream answers.
 */
import { deviceMemory } from "../comfy/device-memory.ts";
import { promptFrameData } from "../comfy/live-socket.ts";
import { isRecord } from "../upstream/http.ts";

/** One model Ollama holds, with /api/ps's own field names. */
export interface ResidentModel {
  name: string;
  /** Bytes the model takes in all. */
  size: number;
  /** Bytes of it in GPU memory (the rest is on the CPU). */
  size_vram: number;
  /** When Ollama unloads it unless used again (RFC 3339), as Ollama said it. */
  expires_at: string | null;
}

export function residentModels(raw: readonly unknown[]): ResidentModel[] {
  return raw.filter(isRecord).map((m) => ({
    name: String(m.name ?? m.model ?? ""),
    size: typeof m.size === "number" ? m.size : 0,
    size_vram: typeof m.size_vram === "number" ? m.size_vram : 0,
    expires_at: typeof m.expires_at === "string" ? m.expires_at : null,
  }));
}

/** `ollama ps`'s PROCESSOR column: where the model's bytes are. */
export function processorOf(m: Pick<ResidentModel, "size" | "size_vram">): string {
  if (m.size <= 0 || m.size_vram >= m.size) return "100% GPU";
  if (m.size_vram <= 0) return "100% CPU";
  const gpu = Math.round((m.size_vram / m.size) * 100);
  return `${100 - gpu}%/${gpu}% CPU/GPU`;
}

/** ComfyUI's view of the card's memory, summed over its devices (bytes). */
export interface ComfyMemory {
  /** In use on the card by anything (vram_total − vram_free). */
  used: number;
  total: number;
  /** Held by ComfyUI's PyTorch (torch_vram_total). */
  torch_reserved: number;
  /**
   * The device (cpu, mps, DirectML) when its memory is the system's (api-facts R1): the figures
   * above are then the machine's RAM, not a card's, and the page says "shared with the system".
   */
  shared?: string;
}

export function comfyMemory(body: unknown): ComfyMemory | undefined {
  if (!isRecord(body) || !Array.isArray(body.devices)) return undefined;
  const m: ComfyMemory = { used: 0, total: 0, torch_reserved: 0 };
  for (const d of body.devices) {
    if (!isRecord(d) || typeof d.vram_total !== "number") continue;
    m.total += d.vram_total;
    if (typeof d.vram_free === "number") m.used += Math.max(0, d.vram_total - d.vram_free);
    if (typeof d.torch_vram_total === "number") m.torch_reserved += d.torch_vram_total;
  }
  const { shared } = deviceMemory(body);
  if (shared !== undefined) m.shared = shared;
  return m;
}

export type ComfyJobNews = { prompt_id: string; started: true } | { prompt_id: string; started: true; value: number; max: number };

/**
 * A relayed /ws text frame, when it says a prompt began (`execution_start`) or moved a step
 * (`progress`); undefined for every other frame. ComfyUI writes `{"type": ...` first, so the other
 * frames (status, executing, previews' metadata) are passed over without being parsed.
 */
export function comfyJobNews(frame: string): ComfyJobNews | undefined {
  const head = /^\{\s*"type"\s*:\s*"(progress|execution_start)"/.exec(frame);
  if (!head) return undefined;
  const data = promptFrameData(frame);
  if (!data) return undefined;
  if (head[1] === "execution_start") return { prompt_id: data.prompt_id, started: true };
  if (typeof data.value !== "number" || typeof data.max !== "number") return undefined;
  return { prompt_id: data.prompt_id, started: true, value: data.value, max: data.max };
}
