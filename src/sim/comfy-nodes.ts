/**
 * The simulated ComfyUI's node catalog and prompt validation (execution.validate_prompt in
 * miniature): unknown class → invalid_prompt, no output node → prompt_no_outputs, plus the
 * in-place input conversion real ComfyUI does (a `cfg` of 8 is stored as 8.0). Pure functions.
 */
import { type PyDict, PyFloat, type PyLike, type PyValue, isDict, pyNumber, pyStr } from "./pyjson.ts";
import { ENHANCER_CLASS, ENHANCER_NODE } from "./comfy-enhancer.ts";

type InputSpec = "INT" | "FLOAT" | "STRING" | "BOOLEAN" | readonly string[] | `link:${string}`;

interface NodeDef {
  display: string;
  category: string;
  inputs: Record<string, InputSpec>;
  outputs: string[];
  outputNode?: boolean;
  /** Samplers do most of a job's work and report per-step progress. */
  sampler?: boolean;
}

export const CHECKPOINTS = ["v1-5-pruned-emaonly-fp16.safetensors"];
const SAMPLERS = ["euler", "euler_ancestral", "heun", "dpmpp_2m", "dpmpp_sde", "ddim", "uni_pc"];
const SCHEDULERS = ["normal", "karras", "exponential", "sgm_uniform", "simple", "ddim_uniform", "beta"];
const UPSCALE = ["nearest-exact", "bilinear", "area", "bicubic", "lanczos"];

export const NODES: Record<string, NodeDef> = {
  CheckpointLoaderSimple: { display: "Load Checkpoint", category: "loaders", inputs: { ckpt_name: CHECKPOINTS }, outputs: ["MODEL", "CLIP", "VAE"] },
  LoraLoader: {
    display: "Load LoRA",
    category: "loaders",
    inputs: { model: "link:MODEL", clip: "link:CLIP", lora_name: [], strength_model: "FLOAT", strength_clip: "FLOAT" },
    outputs: ["MODEL", "CLIP"],
  },
  CLIPSetLastLayer: { display: "CLIP Set Last Layer", category: "conditioning", inputs: { clip: "link:CLIP", stop_at_clip_layer: "INT" }, outputs: ["CLIP"] },
  CLIPTextEncode: { display: "CLIP Text Encode (Prompt)", category: "conditioning", inputs: { text: "STRING", clip: "link:CLIP" }, outputs: ["CONDITIONING"] },
  EmptyLatentImage: { display: "Empty Latent Image", category: "latent", inputs: { width: "INT", height: "INT", batch_size: "INT" }, outputs: ["LATENT"] },
  LatentUpscale: {
    display: "Upscale Latent",
    category: "latent",
    inputs: { samples: "link:LATENT", upscale_method: UPSCALE, width: "INT", height: "INT", crop: ["disabled", "center"] },
    outputs: ["LATENT"],
  },
  KSampler: {
    display: "KSampler",
    category: "sampling",
    sampler: true,
    inputs: {
      model: "link:MODEL",
      seed: "INT",
      steps: "INT",
      cfg: "FLOAT",
      sampler_name: SAMPLERS,
      scheduler: SCHEDULERS,
      positive: "link:CONDITIONING",
      negative: "link:CONDITIONING",
      latent_image: "link:LATENT",
      denoise: "FLOAT",
    },
    outputs: ["LATENT"],
  },
  KSamplerAdvanced: {
    display: "KSampler (Advanced)",
    category: "sampling",
    sampler: true,
    inputs: {
      model: "link:MODEL",
      add_noise: ["enable", "disable"],
      noise_seed: "INT",
      steps: "INT",
      cfg: "FLOAT",
      sampler_name: SAMPLERS,
      scheduler: SCHEDULERS,
      positive: "link:CONDITIONING",
      negative: "link:CONDITIONING",
      latent_image: "link:LATENT",
      start_at_step: "INT",
      end_at_step: "INT",
      return_with_leftover_noise: ["disable", "enable"],
    },
    outputs: ["LATENT"],
  },
  VAEDecode: { display: "VAE Decode", category: "latent", inputs: { samples: "link:LATENT", vae: "link:VAE" }, outputs: ["IMAGE"] },
  VAEEncode: { display: "VAE Encode", category: "latent", inputs: { pixels: "link:IMAGE", vae: "link:VAE" }, outputs: ["LATENT"] },
  LoadImage: { display: "Load Image", category: "image", inputs: { image: [] }, outputs: ["IMAGE", "MASK"] },
  ImageScale: {
    display: "Upscale Image",
    category: "image/upscaling",
    inputs: { image: "link:IMAGE", upscale_method: UPSCALE, width: "INT", height: "INT", crop: ["disabled", "center"] },
    outputs: ["IMAGE"],
  },
  SaveImage: { display: "Save Image", category: "image", inputs: { images: "link:IMAGE", filename_prefix: "STRING" }, outputs: [], outputNode: true },
  PreviewImage: { display: "Preview Image", category: "image", inputs: { images: "link:IMAGE" }, outputs: [], outputNode: true },
  [ENHANCER_CLASS]: ENHANCER_NODE,
};

export type PromptError = {
  type: string;
  message: string;
  details: string;
  extra_info: Record<string, never>;
};

export type Validation = { ok: true; outputs: string[] } | { ok: false; error: PromptError };

function node(prompt: PyDict, id: string): PyDict | undefined {
  const n = prompt.get(id);
  return isDict(n) ? n : undefined;
}

export function classOf(prompt: PyDict, id: string): string {
  const c = node(prompt, id)?.get("class_type");
  return typeof c === "string" ? c : "";
}

export function inputsOf(prompt: PyDict, id: string): PyDict {
  const i = node(prompt, id)?.get("inputs");
  return isDict(i) ? i : new Map();
}

export function isOutputNode(classType: string): boolean {
  return NODES[classType]?.outputNode === true;
}

export function isSampler(classType: string): boolean {
  return NODES[classType]?.sampler === true;
}

/** A link input is `[source_node_id, output_index]`. */
function linkSource(v: PyValue | undefined): string | undefined {
  return Array.isArray(v) && v.length === 2 && typeof v[0] === "string" ? v[0] : undefined;
}

/** Validates like ComfyUI v0.3.64 and converts typed inputs in place; returns the outputs to execute. */
export function validatePrompt(prompt: PyDict, partialTargets: string[] | undefined): Validation {
  const outputs: string[] = [];
  for (const id of prompt.keys()) {
    const n = node(prompt, id);
    const classType = n?.get("class_type");
    if (n === undefined || classType === undefined) {
      return { ok: false, error: err("invalid_prompt", "Cannot execute because a node is missing the class_type property.", `Node ID '#${id}'`) };
    }
    const name = typeof classType === "string" ? classType : pyStr(classType);
    if (typeof classType !== "string" || NODES[classType] === undefined) {
      return { ok: false, error: err("invalid_prompt", `Cannot execute because node ${name} does not exist.`, `Node ID '#${id}'`) };
    }
    if (isOutputNode(classType) && (partialTargets === undefined || partialTargets.includes(id))) outputs.push(id);
  }
  if (outputs.length === 0) return { ok: false, error: err("prompt_no_outputs", "Prompt has no outputs", "") };
  for (const id of executionOrder(prompt, outputs)) convertInputs(prompt, id);
  return { ok: true, outputs };
}

function err(type: string, message: string, details: string): PromptError {
  return { type, message, details, extra_info: {} };
}

/** validate_inputs' `inputs[x] = float(val)` etc.; values that would not convert are left alone. */
function convertInputs(prompt: PyDict, id: string): void {
  const def = NODES[classOf(prompt, id)];
  const inputs = inputsOf(prompt, id);
  if (!def) return;
  for (const [name, spec] of Object.entries(def.inputs)) {
    const v = inputs.get(name);
    if (v === undefined || Array.isArray(v)) continue; // absent or a link
    if (spec === "FLOAT") {
      const n = pyNumber(v) ?? (typeof v === "string" && v.trim() !== "" && !Number.isNaN(Number(v)) ? Number(v) : undefined);
      if (n !== undefined) inputs.set(name, new PyFloat(n));
    } else if (spec === "INT") {
      if (v instanceof PyFloat && Number.isFinite(v.value)) inputs.set(name, Math.trunc(v.value));
      else if (typeof v === "string" && /^\s*[-+]?\d+\s*$/.test(v)) inputs.set(name, Number(v));
    } else if (spec === "STRING") {
      if (typeof v !== "string") inputs.set(name, pyStr(v));
    }
  }
}

/**
 * The order nodes run in: everything the outputs depend on, each node after its inputs, and
 * among ready nodes the one listed first in the prompt (what ComfyUI's staging list produces
 * for ordinary graphs: 4, 5, 6, 7, 3, 8, 9 for the default workflow).
 */
export function executionOrder(prompt: PyDict, outputs: string[]): string[] {
  const needed = new Set<string>();
  const deps = new Map<string, Set<string>>();
  const visit = (id: string): void => {
    if (needed.has(id) || !prompt.has(id)) return;
    needed.add(id);
    const d = new Set<string>();
    for (const v of inputsOf(prompt, id).values()) {
      const src = linkSource(v);
      if (src !== undefined && prompt.has(src)) d.add(src);
    }
    deps.set(id, d);
    for (const s of d) visit(s);
  };
  for (const o of outputs) visit(o);
  const keys = [...prompt.keys()].filter((k) => needed.has(k));
  const done = new Set<string>();
  const order: string[] = [];
  while (order.length < keys.length) {
    const next = keys.find((k) => !done.has(k) && [...(deps.get(k) ?? [])].every((d) => done.has(d)));
    if (next === undefined) break; // a cycle: ComfyUI would refuse it; run what can run
    done.add(next);
    order.push(next);
  }
  return order;
}

/** GET /object_info entries, in ComfyUI's node_info() key order. */
export function objectInfo(only?: string): Map<string, PyLike> {
  const out = new Map<string, PyLike>();
  for (const [name, def] of Object.entries(NODES)) {
    if (only !== undefined && name !== only) continue;
    const required: Record<string, PyLike> = {};
    for (const [input, spec] of Object.entries(def.inputs)) required[input] = inputSpec(spec);
    out.set(name, {
      input: { required },
      input_order: { required: Object.keys(def.inputs) },
      output: def.outputs,
      output_is_list: def.outputs.map(() => false),
      output_name: def.outputs,
      name,
      display_name: def.display,
      description: "",
      python_module: "nodes",
      category: def.category,
      output_node: def.outputNode === true,
    });
  }
  return out;
}

function inputSpec(spec: InputSpec): PyLike {
  if (Array.isArray(spec)) return [[...spec]];
  if (typeof spec === "string" && spec.startsWith("link:")) return [spec.slice(5)];
  switch (spec) {
    case "INT":
      return ["INT", { default: 0, min: 0, max: 18446744073709551615n }];
    case "FLOAT":
      return ["FLOAT", { default: new PyFloat(1), min: new PyFloat(0), max: new PyFloat(100), step: new PyFloat(0.1) }];
    case "STRING":
      return ["STRING", { multiline: false }];
    default:
      return ["BOOLEAN", { default: false }];
  }
}
