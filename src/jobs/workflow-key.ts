/**
 * A workflow's identity for its learned peak (issue 31): a hash of the /prompt graph without what
 * changes from run to run and does not change the memory a run needs: seeds and prompt text.
 * Everything else counts (checkpoints, LoRAs, sizes, batch, steps, the nodes and their links), so
 * a larger image or another model is another workflow, learned on its own.
 *
 * Pure. The graph is ComfyUI's API format: `{ "<node id>": { class_type, inputs: {…} } }`.
 */
import { createHash } from "node:crypto";

/** Inputs dropped whatever their value: a seed changes the pixels, not the memory. */
const SEED = /seed/i;
/** String inputs dropped: the prompt text of the common encoders and primitive nodes. */
const TEXT_KEYS = new Set(["text", "text_g", "text_l", "prompt", "positive", "negative", "string", "value", "clip_l", "t5xxl"]);

/** The key of a /prompt `prompt` graph; undefined when it is not a graph of nodes. */
export function workflowKey(prompt: unknown): string | undefined {
  if (!isRecord(prompt)) return undefined;
  const ids = Object.keys(prompt).sort();
  if (ids.length === 0) return undefined;
  const nodes: unknown[] = [];
  for (const id of ids) {
    const node = prompt[id];
    if (!isRecord(node) || typeof node.class_type !== "string") return undefined;
    const inputs = isRecord(node.inputs) ? node.inputs : {};
    const kept: [string, unknown][] = [];
    for (const k of Object.keys(inputs).sort()) {
      const v = inputs[k];
      if (SEED.test(k)) continue;
      if (typeof v === "string" && TEXT_KEYS.has(k.toLowerCase())) continue;
      kept.push([k, v]);
    }
    nodes.push([id, node.class_type, kept]);
  }
  return createHash("sha256").update(JSON.stringify(canonical(nodes))).digest("hex").slice(0, 16);
}

/** The key of a /prompt body's `prompt`; undefined when the body is not JSON or has no graph. */
export function workflowKeyOfBody(bytes: Uint8Array): string | undefined {
  try {
    const data: unknown = JSON.parse(new TextDecoder().decode(bytes));
    return isRecord(data) ? workflowKey(data.prompt) : undefined;
  } catch {
    return undefined;
  }
}

/** Objects with their keys sorted, so the order a client wrote them in does not matter. */
function canonical(v: unknown): unknown {
  if (Array.isArray(v)) return v.map(canonical);
  if (!isRecord(v)) return v;
  return Object.keys(v)
    .sort()
    .map((k) => [k, canonical(v[k])]);
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}
