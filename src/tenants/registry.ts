/**
 * Drivers by kind name (LLM_KIND, IMAGE_KIND). A driver registers with one line in its side's
 * table; the lines are kept apart by comments so that two branches adding drivers merge cleanly.
 * A kind without a driver yet is `undefined`: choosing it is a start error that says so.
 */
import type { ImageKind, LlmKind } from "../config/tenant-kinds.ts";
import type { ImageTenant, LlmTenant, TenantDriver } from "./types.ts";
import { ollamaDriver } from "./ollama.ts";
import { comfyDriver } from "./comfyui.ts";
import { llamaServerDriver } from "./llama-server.ts";
import { llamaSwapDriver } from "./llama-swap.ts";
import { lmStudioDriver } from "./lmstudio.ts";
import { vllmDriver } from "./vllm.ts";
import { a1111Driver } from "./a1111.ts";
import { swarmDriver } from "./swarmui.ts";

export const LLM_DRIVERS: Record<LlmKind, TenantDriver<LlmTenant> | undefined> = {
  ollama: ollamaDriver,
  // llama.cpp's llama-server, router mode (tenants-llm)
  "llama-server": llamaServerDriver,
  // llama-swap (tenants-llm)
  "llama-swap": llamaSwapDriver,
  // LM Studio, REST v1 (tenants-llm)
  lmstudio: lmStudioDriver,
  // vLLM with sleep mode (tenants-llm)
  vllm: vllmDriver,
};

export const IMAGE_DRIVERS: Record<ImageKind, TenantDriver<ImageTenant> | undefined> = {
  comfyui: comfyDriver,
  // AUTOMATIC1111 and Forge (tenants-image)
  a1111: a1111Driver,
  // SwarmUI (tenants-image)
  swarmui: swarmDriver,
};

/** The driver for a kind the settings accepted, or an error that names the setting. */
export function driverFor<K extends string, T extends LlmTenant | ImageTenant>(
  key: "LLM_KIND" | "IMAGE_KIND",
  table: Record<K, TenantDriver<T> | undefined>,
  kind: K,
): TenantDriver<T> {
  const d = table[kind];
  if (!d) throw new Error(`${key}=${kind}: this build has no driver for it yet`);
  return d;
}
