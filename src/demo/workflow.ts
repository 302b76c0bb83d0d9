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
