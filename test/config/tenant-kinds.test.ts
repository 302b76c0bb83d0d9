/** LLM_KIND and IMAGE_KIND (issue 29): the kinds are read as any enum, and an unknown one names its key and lists the kinds. */
import { describe, expect, test } from "bun:test";
import { ConfigError, loadConfig } from "../../src/config/load.ts";

const BESIDE = "/opt/gt/gpu-turnstile.env";

function load(env: Record<string, string>, file = "") {
  return loadConfig({ env: { OLLAMA_URL: "http://127.0.0.1:11435", ...env }, execPath: "/opt/gt/gpu-turnstile", platform: { os: "linux", arch: "x64" }, readFile: (p) => (p === BESIDE ? file : null) });
}

function problem(env: Record<string, string>, file = ""): string {
  try {
    load(env, file);
  } catch (e) {
    if (e instanceof ConfigError) return e.message;
    throw e;
  }
  throw new Error("expected a ConfigError");
}

describe("LLM_KIND and IMAGE_KIND", () => {
  test("default to Ollama and ComfyUI", () => {
    const { config } = load({});
    expect(config.llmKind).toBe("ollama");
    expect(config.imageKind).toBe("comfyui");
  });

  test("take each kind, case-insensitively", () => {
    expect(load({ LLM_KIND: "vLLM" }).config.llmKind).toBe("vllm");
    expect(load({ LLM_KIND: "llama-server" }).config.llmKind).toBe("llama-server");
    expect(load({ IMAGE_KIND: "A1111" }).config.imageKind).toBe("a1111");
    expect(load({ IMAGE_KIND: "swarmui" }).config.imageKind).toBe("swarmui");
  });

  test("forge is read as a1111 (Forge keeps A1111's API), from the environment and from a file", () => {
    expect(load({ IMAGE_KIND: "forge" }).config.imageKind).toBe("a1111");
    expect(load({}, "IMAGE_KIND=Forge\n").config.imageKind).toBe("a1111");
  });

  test("an unknown kind is a config error naming the key, its line and every kind", () => {
    expect(problem({}, "LLM_KIND=llamacpp\n")).toBe(
      `config error: ${BESIDE}:1: LLM_KIND: expected "ollama", "llama-server", "llama-swap", "lmstudio" or "vllm", got "llamacpp"`,
    );
    expect(problem({ IMAGE_KIND: "automatic" })).toBe('config error: environment: IMAGE_KIND: expected "comfyui", "a1111" (or "forge") or "swarmui", got "automatic"');
    expect(problem({ IMAGE_KIND: "constructor" })).toBe('config error: environment: IMAGE_KIND: expected "comfyui", "a1111" (or "forge") or "swarmui", got "constructor"');
  });
});
