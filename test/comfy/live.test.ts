/**
 * The pure parts of issue 27: whose memory ComfyUI's device uses (device-memory.ts), what a
 * ComfyUI frame announces (live-socket.ts), and a follower woken by an announcement (nudge.ts).
 */
import { describe, expect, test } from "bun:test";
import { deviceMemory } from "../../src/comfy/device-memory.ts";
import { ComfyLiveSocket, comfyNews, liveSocketUrl } from "../../src/comfy/live-socket.ts";
import { Nudges } from "../../src/jobs/nudge.ts";
import { startComfySim } from "../../src/sim/index.ts";
import { fixtureText } from "../sim/helpers.ts";

const device = (type: string, torch: number) => ({ devices: [{ name: type, type, index: null, vram_total: 25276157952, vram_free: 1, torch_vram_total: torch, torch_vram_free: 0 }] });

describe("deviceMemory", () => {
  test("cpu, mps and DirectML use the system's memory: nothing of the card's is measured", () => {
    // As seen against the real server with --cpu (api-facts R1).
    expect(deviceMemory(device("cpu", 25276157952))).toEqual({ shared: "cpu", torchReserved: 0 });
    expect(deviceMemory(device("mps", 25276157952))).toEqual({ shared: "mps", torchReserved: 0 });
    expect(deviceMemory(device("privateuseone", 1 << 30))).toEqual({ shared: "privateuseone", torchReserved: 0 });
  });

  test("cuda (ROCm reports cuda), xpu and unknown types keep the measured check", () => {
    expect(deviceMemory(JSON.parse(fixtureText("comfy-system-stats-loaded.json")))).toEqual({ shared: undefined, torchReserved: 2684354560 });
    expect(deviceMemory(device("xpu", 5))).toEqual({ shared: undefined, torchReserved: 5 });
    expect(deviceMemory(device("npu-of-tomorrow", 7))).toEqual({ shared: undefined, torchReserved: 7 });
    expect(deviceMemory({})).toEqual({ shared: undefined, torchReserved: 0 });
  });
});

describe("comfyNews", () => {
  test("a status frame is a queue change; an end frame names its job", () => {
    expect(comfyNews('{"type": "status", "data": {"status": {"exec_info": {"queue_remaining": 0}}}}')).toEqual({ kind: "queue" });
    expect(comfyNews('{"type": "executing", "data": {"node": null, "prompt_id": "p1"}}')).toEqual({ kind: "ended", promptId: "p1" });
    for (const type of ["execution_success", "execution_error", "execution_interrupted"]) {
      expect(comfyNews(`{"type": "${type}", "data": {"prompt_id": "p2", "timestamp": 1}}`)).toEqual({ kind: "ended", promptId: "p2" });
    }
  });

  test("a node starting, progress and other frames are no news", () => {
    expect(comfyNews('{"type": "executing", "data": {"node": "3", "prompt_id": "p1"}}')).toBeUndefined();
    expect(comfyNews('{"type": "progress", "data": {"value": 1, "max": 20, "prompt_id": "p1"}}')).toBeUndefined();
    expect(comfyNews('{"type": "execution_success", "data": {}}')).toBeUndefined();
    expect(comfyNews('{"type": "status", broken')).toEqual({ kind: "queue" });
    expect(comfyNews('{"type": "executing", broken')).toBeUndefined();
  });

  test("the fixture run's frames: one end, and the queue changes", () => {
    const frames = (JSON.parse(fixtureText("comfy-ws-messages.json")) as unknown[]).map((m) => JSON.stringify(m));
    const news = frames.map(comfyNews).filter((n) => n !== undefined);
    expect(news.filter((n) => n.kind === "ended").length).toBeGreaterThanOrEqual(1);
    expect(news.some((n) => n.kind === "queue")).toBe(true);
  });
});

test("liveSocketUrl keeps ComfyUI's path prefix, drops credentials, and names its own client", () => {
  expect(liveSocketUrl(new URL("http://127.0.0.1:8188"), "me").href).toBe("ws://127.0.0.1:8188/ws?clientId=me");
  expect(liveSocketUrl(new URL("https://u:p@gpu.lan/comfy"), "me").href).toBe("wss://gpu.lan/comfy/ws?clientId=me");
});

describe("Nudges.announce", () => {
  test("wakes a sleeping follower at once without naming its job as removed", async () => {
    const n = new Nudges();
    n.follow("a");
    const woke = n.wait("a", 60_000);
    n.announce("all", 123);
    await woke;
    expect(n.takeNamed("a")).toBe(false);
    expect(n.announcedAt("a")).toBe(123);
  });

  test("an announcement heard while the follower was looking is not lost: its next wait returns at once", async () => {
    const n = new Nudges();
    n.follow("a");
    n.announce(["a"]);
    await n.wait("a", 60_000);
    n.end("a");
    expect(n.announcedAt("a")).toBe(0);
  });
});

test("the live socket sends COMFY_URL's credentials as a header, hears queue changes, and stops for good", async () => {
  const comfy = await startComfySim({ jobMs: 20 });
  const news: string[] = [];
  const base = new URL(comfy.url);
  base.username = "me";
  base.password = "s3cret";
  const live = new ComfyLiveSocket({ base, onNews: (n) => news.push(n.kind), connectTimeoutMs: 1000, backoffInitialMs: 10, backoffMaxMs: 20 });
  try {
    const deadline = Date.now() + 5000;
    while (!live.up && Date.now() < deadline) await Bun.sleep(5);
    expect(live.up).toBe(true);
    const ws = comfy.calls.find((c) => c.path === "/ws")!;
    expect(ws.headers.authorization).toBe(`Basic ${btoa("me:s3cret")}`);
    expect(ws.query).not.toContain("s3cret");
    expect(news).toContain("queue"); // ComfyUI's greeting on connect
  } finally {
    live.stop();
    await comfy.stop();
  }
  expect(live.up).toBe(false);
});
