/**
 * The simulated Ollama's model catalog and the deterministic "inference" it serves: names,
 * sizes, capabilities, token text and embedding vectors. Pure data and functions, no I/O.
 */
import { createHash } from "node:crypto";

export type Capability = "completion" | "tools" | "embedding" | "vision" | "thinking" | "insert";

export interface ModelSpec {
  /** Full name with tag, e.g. "llama3.2:latest" (a bare name gets ":latest"). */
  name: string;
  /** Bytes on disk (/api/tags). */
  size: number;
  /** Bytes of VRAM while loaded (/api/ps size_vram, the GPU ledger); default 1.85 × size. */
  vramBytes?: number;
  family: string;
  parameterSize?: string;
  quantization?: string;
  /** Model maximum context (tags/show); the runner uses min(this, 4096), as /api/ps reports. */
  contextLength?: number;
  embeddingLength?: number;
  capabilities: Capability[];
  /** 64-hex manifest digest; derived from the name when absent. */
  digest?: string;
  /** A cloud model pulled as a stub (`ollama pull gpt-oss:120b-cloud`): runs on ollama.com, listed with remote_*. */
  cloud?: boolean;
}

/** A spec with every optional field resolved. */
export interface Model extends Required<ModelSpec> {
  runnerContext: number;
  modifiedAt: number;
  /** A cloud model's name on ollama.com (`remote_model`), kept by a copy under another name. */
  remoteModel?: string;
}

export const DEFAULT_MODELS: ModelSpec[] = [
  {
    name: "llama3.2:latest",
    size: 2_019_393_189,
    vramBytes: 3_735_225_344,
    family: "llama",
    parameterSize: "3.2B",
    quantization: "Q4_K_M",
    contextLength: 131_072,
    embeddingLength: 3072,
    capabilities: ["completion", "tools"],
    digest: "a80c4f17acd55265feec403c7aef86be0c25983ab279d83f3bcd3abbcb5b8b72",
  },
  {
    name: "qwen2.5:7b",
    size: 4_683_087_332,
    vramBytes: 6_188_000_000,
    family: "qwen2",
    parameterSize: "7.6B",
    quantization: "Q4_K_M",
    contextLength: 32_768,
    embeddingLength: 3584,
    capabilities: ["completion", "tools"],
    digest: "845dbda0ea48ed749caafd9e6037047aa19acfcfd82e704d7ca97d631a0b697e",
  },
  {
    name: "nomic-embed-text:latest",
    size: 274_302_450,
    vramBytes: 590_557_184,
    family: "nomic-bert",
    parameterSize: "137M",
    quantization: "F16",
    contextLength: 2048,
    embeddingLength: 768,
    capabilities: ["embedding"],
    digest: "0a109f422b47e3a30ba2b10eca18548e944e8a23073ee3f3e947efcf3c45e59f",
  },
];

function sha256hex(s: string): string {
  return createHash("sha256").update(s).digest("hex");
}

/** "llama3.2" → "llama3.2:latest"; also drops the default registry prefix, like Ollama's ParseName. */
export function normalizeName(name: string): string {
  let n = name.trim().toLowerCase();
  for (const prefix of ["registry.ollama.ai/library/", "registry.ollama.ai/", "library/"]) {
    if (n.startsWith(prefix)) n = n.slice(prefix.length);
  }
  const lastSlash = n.lastIndexOf("/");
  if (!n.slice(lastSlash + 1).includes(":")) n += ":latest";
  return n;
}

export function resolveModels(specs: ModelSpec[], at: number): Model[] {
  return specs.map((s, i) => {
    const ctx = s.contextLength ?? 4096;
    return {
      name: normalizeName(s.name),
      size: s.size,
      vramBytes: s.vramBytes ?? Math.round(s.size * 1.85),
      family: s.family,
      parameterSize: s.parameterSize ?? "",
      quantization: s.quantization ?? "Q4_K_M",
      contextLength: ctx,
      embeddingLength: s.embeddingLength ?? 768,
      capabilities: s.capabilities,
      digest: s.digest ?? sha256hex(s.name),
      runnerContext: Math.min(ctx, 4096),
      cloud: s.cloud ?? false,
      // Spread the models over the previous days so /api/tags has distinct, plausible times.
      modifiedAt: at - (i + 1) * 86_400_000 - i * 3_723_117,
    };
  });
}

export function findModel(models: Model[], requested: string): Model | undefined {
  if (requested.trim() === "") return undefined;
  const n = normalizeName(requested);
  return models.find((m) => m.name === n);
}

export function supports(m: Model, cap: Capability): boolean {
  return m.capabilities.includes(cap);
}

const ANSWER = ["The", " sky", " appears", " blue", " because", " of", " Rayleigh", " scattering", "."];

/** The i-th token of every answer: the fixtures' sentence, repeated as needed. */
export function tokenAt(i: number): string {
  return ANSWER[i % ANSWER.length] as string;
}

/** A rough token count for a prompt, like a tokenizer would give for English text. */
export function countTokens(text: string): number {
  return Math.max(1, Math.ceil(text.length / 4));
}

/** Deterministic unit vector for `text` with float32-friendly values (six decimals, as Go prints them). */
export function embedText(text: string, dims: number): number[] {
  const seed = createHash("sha256").update(text).digest();
  let state = seed.readUInt32LE(0) || 1;
  const raw: number[] = [];
  let norm = 0;
  for (let i = 0; i < dims; i++) {
    // xorshift32: cheap and reproducible across runs.
    state ^= state << 13;
    state >>>= 0;
    state ^= state >>> 17;
    state ^= state << 5;
    state >>>= 0;
    const v = state / 0xffffffff - 0.5;
    raw.push(v);
    norm += v * v;
  }
  const scale = 1 / Math.sqrt(norm || 1);
  return raw.map((v) => Math.round(v * scale * 1e6) / 1e6);
}

/** The `context` array of a final /api/generate chunk: token ids of prompt + answer. */
export function contextIds(prompt: string, evalCount: number, promptTokens: number): number[] {
  const out: number[] = [];
  const h = createHash("sha256").update(prompt).digest();
  for (let i = 0; i < promptTokens + evalCount; i++) out.push(((h[i % h.length] as number) * 509 + i * 7919) % 128_256);
  return out;
}
