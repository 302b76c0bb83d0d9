import { describe, expect, test } from "bun:test";
import { ListenError, parseListen } from "../../src/config/listen.ts";

describe("parseListen", () => {
  const ok: Array<[string, string | undefined, number]> = [
    [":11434", undefined, 11434],
    [":0", undefined, 0],
    ["127.0.0.1:11434", "127.0.0.1", 11434],
    ["0.0.0.0:8188", "0.0.0.0", 8188],
    ["[::1]:11434", "::1", 11434],
    ["[::]:8188", "::", 8188],
    ["[fe80::1%eth0]:80", "fe80::1%eth0", 80],
    ["localhost:65535", "localhost", 65535],
    ["gpu-box.lan:8188", "gpu-box.lan", 8188],
  ];
  for (const [text, hostname, port] of ok) {
    test(`${text} → ${hostname ?? "(all interfaces)"} port ${port}`, () => {
      expect(parseListen(text)).toEqual({ hostname, port });
    });
  }

  const bad: Array<[string, RegExp]> = [
    ["11434", /did you mean ":11434"\?/],
    ["", /expected ":port"/],
    ["localhost", /expected ":port"/],
    [":", /invalid port ""/],
    [":65536", /invalid port "65536"/],
    [":http", /invalid port "http"/],
    [":-1", /invalid port "-1"/],
    ["::1:11434", /IPv6 address needs brackets/],
    ["[::1]11434", /expected ":port"/],
    ["[::1:11434", /expected ":port"/],
    ["[nope]:80", /invalid IPv6 address "nope"/],
    ["bad_host!:80", /invalid host "bad_host!"/],
    // Digits and dots are an IPv4 address, never a name: Bun could not bind it and said "in use".
    ["999.1.1.1:80", /invalid IPv4 address "999.1.1.1"/],
    ["127.0.0:80", /invalid IPv4 address "127.0.0"/],
  ];
  for (const [text, why] of bad) {
    test(`rejects ${JSON.stringify(text)}`, () => {
      expect(() => parseListen(text)).toThrow(ListenError);
      expect(() => parseListen(text)).toThrow(why);
    });
  }

  test("the all-interfaces form binds IPv4 and IPv6 loopback alike in Bun.serve", async () => {
    const { hostname, port } = parseListen(":0");
    const server = Bun.serve({ hostname, port, fetch: () => new Response("ok") });
    try {
      const v4 = await fetch(`http://127.0.0.1:${server.port}/`);
      expect(await v4.text()).toBe("ok");
      // IPv6 may be missing on some hosts; where ::1 exists it must be served too.
      const v6 = await fetch(`http://[::1]:${server.port}/`).then(
        (r) => r.text(),
        () => "no-ipv6",
      );
      expect(["ok", "no-ipv6"]).toContain(v6);
    } finally {
      server.stop(true);
    }
  });
});
