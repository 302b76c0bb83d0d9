/**
 * What ComfyUI measures of the card's memory now (issue 31, COEXIST): /system_stats `vram_total`
 * and `vram_free` of the devices with memory of their own. `vram_free` is the device's free memory
 * plus what PyTorch holds cached, so everything else on the card (Ollama's models, the desktop) is
 * counted in it. Where the memory is the system's (device-memory.ts) nothing is measured. Pure.
 */
import { isRecord } from "../upstream/http.ts";
import { deviceMemory, SHARED_MEMORY_DEVICES } from "./device-memory.ts";

export interface CardFigures {
  /** The device type when ComfyUI's memory is the system's; undefined on a card of its own. */
  shared: string | undefined;
  totalBytes: number;
  freeBytes: number;
}

export function cardFigures(body: unknown): CardFigures {
  const { shared } = deviceMemory(body);
  let totalBytes = 0;
  let freeBytes = 0;
  const devices = (isRecord(body) && Array.isArray(body.devices) ? body.devices : []).filter(isRecord);
  for (const d of devices) {
    if (SHARED_MEMORY_DEVICES.includes(typeof d.type === "string" ? d.type.toLowerCase() : "")) continue;
    if (typeof d.vram_total === "number") totalBytes += d.vram_total;
    if (typeof d.vram_free === "number") freeBytes += d.vram_free;
  }
  return { shared, totalBytes, freeBytes };
}
