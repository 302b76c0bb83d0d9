import { describe, expect, test } from "bun:test";
import { parseClasses } from "../../src/fair/classes.ts";
import { fairSetup } from "../../src/fair/setup.ts";
import { identify, parseClients, parseRange } from "../../src/fair/identity.ts";

const CLASSES = ["interactive", "normal", "batch"];
const FILE = `# who is who
alice   interactive  key=sk-alice-secret  client_id=alice-
render  batch        cidr=10.0.5.0/24 cidr=fd00:5::/32
lab     normal       cidr=192.168.1.7
`;

function rules() {
  const p = parseClients(FILE, CLASSES);
  if (!p.ok) throw new Error(p.message);
  return p.rules;
}

describe("identify", () => {
  test("the API key first, then client_id, then the address", () => {
    const r = rules();
    expect(identify({ authorization: "Bearer sk-alice-secret", clientId: "x", address: "10.0.5.9" }, r)).toMatchObject({ client: "alice", cls: "interactive", by: "key" });
    expect(identify({ clientId: "alice-tab-3", address: "10.0.5.9" }, r)).toMatchObject({ client: "alice", by: "client_id" });
    expect(identify({ clientId: "someone", address: "10.0.5.9" }, r)).toMatchObject({ client: "render", cls: "batch", by: "address" });
    expect(identify({ address: "::ffff:10.0.5.200" }, r)).toMatchObject({ client: "render" });
    expect(identify({ address: "fd00:5:1::2" }, r)).toMatchObject({ client: "render" });
    expect(identify({ address: "192.168.1.7" }, r)).toMatchObject({ client: "lab", cls: "normal" });
    expect(identify({ address: "192.168.1.8" }, r)).toMatchObject({ client: "192.168.1.8", cls: "normal", known: false });
  });

  test("an unknown key or client_id is named by a short hash, never by itself", () => {
    const k = identify({ authorization: "Bearer sk-unknown-1234", address: "127.0.0.1" }, rules());
    expect(k.client).toMatch(/^key-[0-9a-f]{8}$/);
    expect(k.client).not.toContain("1234");
    expect(identify({ authorization: "Bearer sk-unknown-1234" }, []).client).toBe(k.client);
    expect(identify({ clientId: "3f2a-tab" }, []).client).toMatch(/^comfy-[0-9a-f]{8}$/);
    expect(identify({}, []).client).toBe("unknown");
  });
});

describe("parseClients", () => {
  test("a bad line is named by its number, and a key's value is never echoed", () => {
    const p = parseClients("alice interactive key=sk-secret\nbob vip key=sk-other\n", CLASSES);
    expect(p).toEqual({ ok: false, line: 2, message: 'client bob: class must be one of interactive, normal, batch, not "vip"' });
    const q = parseClients("carol normal key=sk-abc wat=sk-abc\n", CLASSES);
    expect(q.ok).toBe(false);
    expect(JSON.stringify(q)).not.toContain("sk-abc");
    expect(parseClients("dave normal\n", CLASSES)).toMatchObject({ ok: false, line: 1 });
    expect(parseClients("eve normal cidr=10.0.0.0/33\n", CLASSES)).toMatchObject({ ok: false, line: 1 });
    expect(parseClients("a normal cidr=10.0.0.1\na batch cidr=10.0.0.2\n", CLASSES)).toMatchObject({ ok: false, line: 2 });
  });

  test("ranges", () => {
    expect(parseRange("10.0.0.0/8")).toBeDefined();
    expect(parseRange("::1")).toBeDefined();
    expect(parseRange("1.2.3")).toBeUndefined();
    expect(parseRange("fe80::1::2")).toBeUndefined();
  });
});

describe("parseClasses", () => {
  test("name:weight, best first; normal must be there", () => {
    expect(parseClasses("interactive:4,normal:2,batch:1")).toEqual({ ok: true, classes: [
      { name: "interactive", weight: 4 },
      { name: "normal", weight: 2 },
      { name: "batch", weight: 1 },
    ] });
    expect(parseClasses("fast:3,batch:1")).toMatchObject({ ok: false });
    expect(parseClasses("normal:0")).toMatchObject({ ok: false });
    expect(parseClasses("normal")).toMatchObject({ ok: false });
  });
});

describe("fairSetup", () => {
  const base = { fairClasses: "interactive:4,normal:2,batch:1", fairChatsFirst: "batch", clientsFile: "/etc/clients", quotaGpuSeconds: "0" };
  test("FAIR_CHATS_FIRST marks its classes; an unknown one is named", () => {
    const ok = fairSetup(base, "n batch cidr=10.0.0.1\n");
    expect(ok.ok && ok.fair.classes.filter((c) => c.chatsFirst).map((c) => c.name)).toEqual(["batch"]);
    expect(ok.ok && ok.fair.identify({ address: "10.0.0.1" })).toMatchObject({ client: "n", cls: "batch" });
    expect(fairSetup({ ...base, fairChatsFirst: "bulk" }, undefined)).toEqual({ ok: false, message: 'FAIR_CHATS_FIRST: "bulk" is not a class of FAIR_CLASSES (interactive, normal, batch)' });
    // FAIR_CHATS_FIRST left at its default with classes of one's own that have no batch: none give way.
    const own = fairSetup({ ...base, fairClasses: "fast:3,normal:1" }, undefined);
    expect(own.ok && own.fair.classes.some((c) => c.chatsFirst)).toBe(false);
    expect(fairSetup(base, "x vip cidr=10.0.0.1\n")).toMatchObject({ ok: false, message: expect.stringContaining("CLIENTS_FILE /etc/clients line 1:") });
  });

  test("GPU seconds: a client's own gpu=N, else its class's, else every client's; off when none is set", () => {
    const file = "alice interactive key=sk-alice gpu=60\nrender batch cidr=10.0.5.0/24\nlab normal cidr=10.0.6.1 gpu=0\n";
    const ok = fairSetup({ ...base, quotaGpuSeconds: "1800, batch:600" }, file);
    if (!ok.ok) throw new Error(ok.message);
    const limit = (seen: Parameters<typeof ok.fair.identify>[0]) => ok.fair.gpuLimitS(ok.fair.identify(seen));
    expect(ok.fair.gpuQuotas).toBe(true);
    expect(limit({ authorization: "Bearer sk-alice" })).toBe(60);
    expect(limit({ address: "10.0.5.3" })).toBe(600);
    expect(limit({ address: "10.0.6.1" })).toBe(0);
    expect(limit({ address: "10.0.9.9" })).toBe(1800);
    const off = fairSetup(base, "render batch cidr=10.0.5.0/24\n");
    expect(off.ok && off.fair.gpuQuotas).toBe(false);
    const own = fairSetup(base, "render batch cidr=10.0.5.0/24 gpu=30\n");
    expect(own.ok && own.fair.gpuQuotas).toBe(true);
  });

  test("a QUOTA_GPU_SECONDS that cannot be read, or a gpu= that is not a number, is named", () => {
    expect(fairSetup({ ...base, quotaGpuSeconds: "vip:60" }, undefined)).toEqual({ ok: false, message: 'QUOTA_GPU_SECONDS: "vip" is not a class of FAIR_CLASSES (interactive, normal, batch)' });
    expect(fairSetup({ ...base, quotaGpuSeconds: "60,batch:1m" }, undefined)).toEqual({ ok: false, message: 'QUOTA_GPU_SECONDS: "batch:1m" is not seconds or class:seconds (e.g. 1800 or batch:600)' });
    expect(fairSetup({ ...base, quotaGpuSeconds: "60,120" }, undefined)).toMatchObject({ ok: false, message: expect.stringContaining("more than one number") });
    expect(fairSetup({ ...base, quotaGpuSeconds: "batch:6,batch:7" }, undefined)).toMatchObject({ ok: false, message: expect.stringContaining("class batch is named twice") });
    expect(fairSetup(base, "# x\nalice normal key=sk-a gpu=10m\n")).toEqual({ ok: false, message: "CLIENTS_FILE /etc/clients line 2: client alice: gpu=10m is not a number (seconds per QUOTA_GPU_WINDOW, 0 = no limit)" });
  });
});
