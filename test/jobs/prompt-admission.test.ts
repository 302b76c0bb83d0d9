/** What a /prompt must pass before it may take the GPU: its body, its prompt_id, ComfyUI's Origin rule. */
import { describe, expect, test } from "bun:test";
import { comfyRefusesOrigin, hostOriginMismatch } from "../../src/comfy/origin-rule.ts";
import { CANONICAL_UUID, readPromptBody } from "../../src/jobs/prompt-body.ts";
import { PromptIds } from "../../src/jobs/prompt-ids.ts";

const enc = (s: string) => new TextEncoder().encode(s);
const dec = (b: Uint8Array) => new TextDecoder().decode(b);
const ID = "5b0a1e3c-8d4f-4f7e-9a51-2c6b9e7d3f10";
const MINTED = "0f0f0f0f-0000-4000-8000-000000000001";

describe("readPromptBody", () => {
  test("a canonical UUID passes, the bytes untouched; client_id is read", () => {
    const text = `{"prompt": {"1": {"class_type": "X", "inputs": {"cfg": 8.0}}}, "client_id": "c1", "prompt_id": "${ID}"}`;
    const r = readPromptBody(enc(text));
    expect(r).toMatchObject({ promptId: ID, minted: false, clientId: "c1" });
    expect(dec((r as { bytes: Uint8Array }).bytes)).toBe(text);
  });

  test("the ids the probe used are refused with ComfyUI's invalid_prompt_id", () => {
    for (const bad of ["", "x".repeat(70_000), "x".repeat(9_000), "job\ud800", ID.toUpperCase(), `{${ID}}`, ` ${ID}`, 12, null]) {
      const r = readPromptBody(enc(JSON.stringify({ prompt: {}, prompt_id: bad })));
      expect(r).toMatchObject({ status: 400, type: "invalid_prompt_id" });
      expect((r as { message: string }).message.length).toBeLessThan(200);
    }
  });

  test("without a prompt_id one is minted and written first, the client's text kept as sent", () => {
    const text = ` {"prompt": {"3": {"inputs": {"cfg": 8.0, "seed": 12345678901234567890}}}}`;
    const r = readPromptBody(enc(text), () => MINTED);
    expect(r).toMatchObject({ promptId: MINTED, minted: true });
    const out = dec((r as { bytes: Uint8Array }).bytes);
    expect(out).toBe(` {"prompt_id": "${MINTED}", "prompt": {"3": {"inputs": {"cfg": 8.0, "seed": 12345678901234567890}}}}`);
    expect(JSON.parse(out).prompt_id).toBe(MINTED);
    expect(dec((readPromptBody(enc("{}"), () => MINTED) as { bytes: Uint8Array }).bytes)).toBe(`{"prompt_id": "${MINTED}"}`);
    expect(CANONICAL_UUID.test((readPromptBody(enc("{}")) as { promptId: string }).promptId)).toBe(true);
  });

  test("a body that is not a JSON object is a 400, never forwarded without an id", () => {
    for (const bad of ["", "[1]", "12", "{", '{"prompt": NaN}', "\xff"]) {
      expect(readPromptBody(enc(bad))).toMatchObject({ status: 400, type: "invalid_json" });
    }
  });

  test("a duplicated prompt_id key counts by its last value, as in Python and JSON.parse", () => {
    const r = readPromptBody(enc(`{"prompt_id": "${ID}", "prompt_id": "nope"}`));
    expect(r).toMatchObject({ status: 400, type: "invalid_prompt_id" });
  });
});

describe("PromptIds", () => {
  test("an id is claimed once; forgetting gives it back; the oldest goes past the cap", () => {
    const ids = new PromptIds(2);
    expect(ids.claim("a")).toBe(true);
    expect(ids.claim("a")).toBe(false);
    ids.forget("a");
    expect(ids.claim("a")).toBe(true);
    expect(ids.claim("b")).toBe(true);
    expect(ids.claim("c")).toBe(true);
    expect(ids.claim("a")).toBe(true); // evicted: ComfyUI's own history still catches it
    expect(ids.claim("c")).toBe(false);
  });
});

describe("ComfyUI's Origin rule (server.py create_origin_only_middleware)", () => {
  const comfy = new URL("http://127.0.0.1:8188");
  const h = (o: Record<string, string>) => new Headers(o);

  test("the middleware's host/origin comparison, case by case", () => {
    expect(hostOriginMismatch("127.0.0.1:8188", "http://127.0.0.1:8188")).toBe(false);
    expect(hostOriginMismatch("127.0.0.1:8188", "http://evil.example")).toBe(true);
    expect(hostOriginMismatch("localhost:8188", "http://localhost:3000")).toBe(true);
    // An Origin without a port is compared by hostname only (and a Host without one likewise).
    expect(hostOriginMismatch("127.0.0.1:8188", "http://127.0.0.1")).toBe(false);
    expect(hostOriginMismatch("localhost", "http://localhost:5173")).toBe(false);
    expect(hostOriginMismatch("[::1]:8188", "http://[::1]:8188")).toBe(false);
    expect(hostOriginMismatch("[::1]:8188", "http://evil.example:8188")).toBe(true);
    // Only a loopback Host is protected; "null" and file:// origins have no netloc.
    expect(hostOriginMismatch("192.168.1.5:8188", "http://evil.example")).toBe(false);
    expect(hostOriginMismatch("127.0.0.1:8188", "null")).toBe(false);
  });

  test("judged on the headers ComfyUI will get: an Origin naming the turnstile is rewritten, a foreign one is not", () => {
    expect(comfyRefusesOrigin(h({ host: "gpu.lan:8189", origin: "http://gpu.lan:8189" }), comfy)).toBe(false);
    expect(comfyRefusesOrigin(h({ host: "localhost:8189", origin: "http://localhost:3000" }), comfy)).toBe(true);
    expect(comfyRefusesOrigin(h({ host: "gpu.lan:8189", origin: "https://evil.example" }), comfy)).toBe(true);
    expect(comfyRefusesOrigin(h({ host: "gpu.lan:8189" }), comfy)).toBe(false);
    // Newer ComfyUI refuses what the browser itself calls cross-site, whatever the Host.
    expect(comfyRefusesOrigin(h({ host: "gpu.lan:8189", "sec-fetch-site": "cross-site" }), comfy)).toBe(true);
    expect(comfyRefusesOrigin(h({ host: "gpu.lan:8189", "sec-fetch-site": "same-site" }), comfy)).toBe(false);
    // A ComfyUI on a non-loopback address does not compare at all.
    expect(comfyRefusesOrigin(h({ host: "gpu.lan:8189", origin: "https://evil.example" }), new URL("http://10.0.0.2:8188"))).toBe(false);
  });
});
