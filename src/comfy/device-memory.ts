/**
 * Whose memory ComfyUI's device uses (issue 27, api-facts R1). On `cuda` (ROCm builds report
 * `cuda` too), `xpu` and the other accelerators with memory of their own, /system_stats'
 * `torch_vram_total` is what PyTorch holds on the card and drops after /free. On `cpu` and on
 * Apple Silicon (`mps`) ComfyUI reports the machine's RAM there, and under DirectML
 * (`privateuseone`, some builds say `directml`) a constant 1 GiB: a figure that never drops, so
 * waiting for it to drop only waits out FREE_TIMEOUT. Pure, so the rule is tested on its own.
 */
import { isRecord } from "../upstream/http.ts";

/** Device types whose memory is the system's: nothing of the card's own is measured there. */
export const SHARED_MEMORY_DEVICES: readonly string[] = ["cpu", "mps", "directml", "privateuseone"];

export interface DeviceMemory {
  /**
   * The device type when every device ComfyUI lists uses the system's memory (`cpu`, `mps`, …):
   * its release is then not measured. undefined for a card with memory of its own.
   */
  shared: string | undefined;
  /** Bytes PyTorch holds reserved on devices with memory of their own (0 when shared). */
  torchReserved: number;
}

/** What a /system_stats body says of ComfyUI's memory. */
export function deviceMemory(body: unknown): DeviceMemory {
  const devices = (isRecord(body) && Array.isArray(body.devices) ? body.devices : []).filter(isRecord);
  let torchReserved = 0;
  let measured = devices.length === 0;
  let shared: string | undefined;
  for (const d of devices) {
    const type = typeof d.type === "string" ? d.type.toLowerCase() : "";
    if (SHARED_MEMORY_DEVICES.includes(type)) {
      shared ??= type;
      continue;
    }
    // An unknown type keeps the measured check: a wrong "shared" would hand on a card still full.
    measured = true;
    if (typeof d.torch_vram_total === "number") torchReserved += d.torch_vram_total;
  }
  return { shared: measured ? undefined : shared, torchReserved };
}
