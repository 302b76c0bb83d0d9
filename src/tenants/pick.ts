/**
 * The composition root's choice: one LLM-side and one image-side driver, from LLM_KIND and
 * IMAGE_KIND, for the URLs that are set (an empty OLLAMA_URL or COMFY_URL disables that side).
 */
import type { Config } from "../config/types.ts";
import { driverFor, IMAGE_DRIVERS, LLM_DRIVERS } from "./registry.ts";
import type { ImageTenant, LlmTenant } from "./types.ts";

export interface Tenants {
  llm: LlmTenant | undefined;
  image: ImageTenant | undefined;
}

/** `local`: whether a host name is this machine (a refused port there proves nothing runs). */
export function pickTenants(config: Config, local: (hostname: string) => boolean): Tenants {
  const make = <T extends LlmTenant | ImageTenant>(url: string, create: (ctx: { base: URL; config: Config; local: boolean }) => T) => {
    if (!url) return undefined;
    const base = new URL(url);
    return create({ base, config, local: local(base.hostname) });
  };
  return {
    llm: make(config.ollamaUrl, (ctx) => driverFor("LLM_KIND", LLM_DRIVERS, config.llmKind).create(ctx)),
    image: make(config.comfyUrl, (ctx) => driverFor("IMAGE_KIND", IMAGE_DRIVERS, config.imageKind).create(ctx)),
  };
}
