/**
 * The kinds of server each side of the card can be (LLM_KIND, IMAGE_KIND). The names live here,
 * below everything, so the settings table can list them; each has a driver in src/tenants/
 * (registry.ts, which a test holds to this list).
 */
export const LLM_KINDS = ["ollama", "llama-server", "llama-swap", "lmstudio", "vllm"] as const;
export const IMAGE_KINDS = ["comfyui", "a1111", "swarmui"] as const;
/** Other names for a kind: Forge keeps A1111's /sdapi/v1 API, so it is the a1111 driver. */
export const IMAGE_KIND_ALIASES: Readonly<Record<string, ImageKind>> = { forge: "a1111" };

export type LlmKind = (typeof LLM_KINDS)[number];
export type ImageKind = (typeof IMAGE_KINDS)[number];
