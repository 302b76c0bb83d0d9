/** A small text-to-image workflow in ComfyUI's API format (the default workflow of its web UI). */
export function demoWorkflow(text: string, seed: number, clientId: string): unknown {
  return {
    client_id: clientId,
    prompt: {
      "3": {
        class_type: "KSampler",
        inputs: {
          seed,
          steps: 20,
          cfg: 8,
          sampler_name: "euler",
          scheduler: "normal",
          denoise: 1,
          model: ["4", 0],
          positive: ["6", 0],
          negative: ["7", 0],
          latent_image: ["5", 0],
        },
      },
      "4": { class_type: "CheckpointLoaderSimple", inputs: { ckpt_name: "v1-5-pruned-emaonly-fp16.safetensors" } },
      "5": { class_type: "EmptyLatentImage", inputs: { width: 512, height: 512, batch_size: 1 } },
      "6": { class_type: "CLIPTextEncode", inputs: { text, clip: ["4", 1] } },
      "7": { class_type: "CLIPTextEncode", inputs: { text: "text, watermark", clip: ["4", 1] } },
      "8": { class_type: "VAEDecode", inputs: { samples: ["3", 0], vae: ["4", 2] } },
      "9": { class_type: "SaveImage", inputs: { filename_prefix: "ComfyUI", images: ["8", 0] } },
    },
  };
}

/**
 * The same workflow with a prompt-enhancer step (comfyui-ollama's OllamaGenerate node): in the
 * middle of the job ComfyUI asks Ollama at `ollamaUrl` to rewrite `text`, and the positive prompt
 * is its answer. Pointed at the turnstile's nested listener (LISTEN_OLLAMA_NESTED).
 */
export function enhancerWorkflow(text: string, seed: number, clientId: string, ollamaUrl: string, model: string): unknown {
  const w = demoWorkflow(text, seed, clientId) as { prompt: Record<string, { class_type: string; inputs: Record<string, unknown> }> };
  w.prompt["10"] = {
    class_type: "OllamaGenerate",
    inputs: { prompt: `Rewrite as a detailed image prompt: ${text}`, model, url: ollamaUrl, keep_alive: 5 },
  };
  w.prompt["6"]!.inputs.text = ["10", 0];
  return w;
}
