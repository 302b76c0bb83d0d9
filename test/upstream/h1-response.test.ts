import { describe, expect, test } from "bun:test";
import { MAX_HEAD_BYTES, ProtocolError, ResponseReader, type ResponseHead } from "../../src/upstream/h1-response.ts";

const enc = new TextEncoder();
const dec = new TextDecoder();

interface Seen {
  heads: ResponseHead[];
  body: string;
  ends: number;
}

function reader(head = false): { r: ResponseReader; seen: Seen } {
  const seen: Seen = { heads: [], body: "", ends: 0 };
  const r = new ResponseReader({
    head: (h) => seen.heads.push(h),
    data: (b) => (seen.body += dec.decode(b, { stream: true })),
    end: () => seen.ends++,
  });
  r.expect(head);
  return { r, seen };
}

/** Feed `wire` cut at `cut` (every cut point is tried by the callers). */
function feedSplit(wire: string, cut: number, head = false): { r: ResponseReader; seen: Seen } {
  const x = reader(head);
  const bytes = enc.encode(wire);
  x.r.feed(bytes.subarray(0, cut));
  x.r.feed(bytes.subarray(cut));
  return x;
}

function eachCut(wire: string, check: (x: { r: ResponseReader; seen: Seen }) => void, head = false): void {
  for (let cut = 0; cut <= wire.length; cut++) check(feedSplit(wire, cut, head));
  // and one byte at a time
  const x = reader(head);
  for (const b of enc.encode(wire)) x.r.feed(Uint8Array.of(b));
  check(x);
}

describe("ResponseReader framing", () => {
  test("the head says whether any field is hop-by-hop (the pool then filters; otherwise it hands the fields on as they are)", () => {
    const hop = (fields: string) => {
      const { r, seen } = reader();
      r.feed(enc.encode(`HTTP/1.1 200 OK\r\n${fields}Content-Length: 0\r\n\r\n`));
      return seen.heads[0]!.hopByHop;
    };
    expect(hop("Content-Type: text/plain\r\nX-Trace: 1\r\n")).toBe(false);
    expect(hop("Keep-Alive: timeout=5\r\n")).toBe(true);
    expect(hop("Connection: x-trace\r\nX-Trace: 1\r\n")).toBe(true);
    expect(hop("PROXY-CONNECTION: keep-alive\r\n")).toBe(true);
  });

  test("Content-Length body, cut anywhere, arrives whole and ends once; the connection is reusable", () => {
    const wire = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{\"a\":\"bcd\"}";
    eachCut(wire, ({ r, seen }) => {
      expect(seen.heads).toHaveLength(1);
      expect(seen.heads[0]!.status).toBe(200);
      expect(seen.heads[0]!.statusText).toBe("OK");
      expect(seen.heads[0]!.bodyLength).toBe(11);
      expect(seen.heads[0]!.fields).toEqual([
        ["Content-Type", "application/json"],
        ["Content-Length", "11"],
      ]);
      expect(seen.body).toBe('{"a":"bcd"}');
      expect(seen.ends).toBe(1);
      expect(r.reusable).toBe(true);
    });
  });

  test("chunked body with extensions and trailers, cut anywhere, is decoded", () => {
    const wire = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n1\r\n \r\nA\r\n0123456789\r\n0\r\nX-Trailer: t\r\n\r\n";
    eachCut(wire, ({ r, seen }) => {
      expect(seen.body).toBe("hello 0123456789");
      expect(seen.heads[0]!.bodyLength).toBeUndefined();
      expect(seen.ends).toBe(1);
      expect(r.reusable).toBe(true);
    });
  });

  test("chunked body with no trailers ends at the last chunk's blank line", () => {
    eachCut("HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", ({ r, seen }) => {
      expect(seen.body).toBe("abc");
      expect(seen.ends).toBe(1);
      expect(r.reusable).toBe(true);
    });
  });

  test("Transfer-Encoding wins over Content-Length (RFC 9112 §6.3)", () => {
    const { seen } = feedSplit("HTTP/1.1 200 OK\r\nContent-Length: 99\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n", 0);
    expect(seen.body).toBe("ok");
    expect(seen.ends).toBe(1);
  });

  test("no length: the body runs until the connection closes, which is then not reusable", () => {
    const { r, seen } = feedSplit("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\npart one, ", 30);
    r.feed(enc.encode("part two"));
    expect(seen.ends).toBe(0);
    r.eof();
    expect(seen.body).toBe("part one, part two");
    expect(seen.ends).toBe(1);
    expect(r.reusable).toBe(false);
  });

  test("HEAD, 204 and 304 have no body whatever their fields say", () => {
    const head = feedSplit("HTTP/1.1 200 OK\r\nContent-Length: 1234\r\n\r\n", 10, true);
    expect(head.seen.heads[0]!.bodyLength).toBe(0);
    expect(head.seen.heads[0]!.fields).toContainEqual(["Content-Length", "1234"]);
    expect(head.seen.ends).toBe(1);
    expect(head.r.reusable).toBe(true);
    for (const status of [204, 304]) {
      const x = feedSplit(`HTTP/1.1 ${status} X\r\nContent-Length: 5\r\n\r\n`, 3);
      expect(x.seen.ends).toBe(1);
      expect(x.r.reusable).toBe(true);
    }
  });

  test("interim 100 and 103 responses are dropped; the final one is reported", () => {
    eachCut("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a.css>\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok", ({ seen }) => {
      expect(seen.heads.map((h) => h.status)).toEqual([201]);
      expect(seen.body).toBe("ok");
    });
  });

  test("Connection: close and HTTP/1.0 make the connection single-use", () => {
    expect(feedSplit("HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n", 0).r.reusable).toBe(false);
    expect(feedSplit("HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n", 0).r.reusable).toBe(false);
    expect(feedSplit("HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n", 0).r.reusable).toBe(true);
  });

  test("field values lose only SP and HTAB around them; other bytes (0xA0 ending UTF-8 'à') stay", () => {
    eachCut("HTTP/1.1 200 OK\r\nX-Title: voilà\r\nX-Pad: \t \u00a0x\u00a0 \t\r\nContent-Length: 0\r\n\r\n", ({ seen }) => {
      // The reader's strings hold one char per byte (latin1): what Headers writes back out byte for byte.
      const bytes = (s: string) => Buffer.from(s, "utf8").toString("latin1");
      expect(seen.heads[0]!.fields).toEqual([
        ["X-Title", bytes("voilà")],
        ["X-Pad", bytes("\u00a0x\u00a0")],
        ["Content-Length", "0"],
      ]);
    });
  });

  test("chunk sizes and Content-Length take any number of leading zeros", () => {
    const zeros = "0".repeat(5000);
    eachCut(`HTTP/1.1 200 OK\r\nContent-Length: ${"0".repeat(30)}3\r\n\r\nabc`, ({ seen }) => {
      expect(seen.heads[0]!.bodyLength).toBe(3);
      expect(seen.body).toBe("abc");
    });
    const { r, seen } = feedSplit(`HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n${zeros}3\r\nabc\r\n${"0".repeat(13)}1;x=y\r\nd\r\n${zeros}\r\n\r\n`, 60);
    expect(seen.body).toBe("abcd");
    expect(seen.ends).toBe(1);
    expect(r.reusable).toBe(true);
    // The largest size that is still exact: 12 hex digits.
    const big = feedSplit(`HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n00ffffffffffff\r\nab`, 0);
    expect(big.seen.body).toBe("ab");
  });

  test("Transfer-Encoding on an HTTP/1.0 answer: read as chunked, then the connection is not reused", () => {
    eachCut("HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n", ({ r, seen }) => {
      expect(seen.body).toBe("ok");
      expect(seen.ends).toBe(1);
      expect(r.reusable).toBe(false);
    });
  });

  test("a transfer coding on an answer without a body (HEAD, 204, 304) is no concern", () => {
    expect(feedSplit("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 0, true).seen.ends).toBe(1);
    expect(feedSplit("HTTP/1.1 204 No Content\r\nTransfer-Encoding: gzip\r\n\r\n", 0).seen.ends).toBe(1);
  });

  test("a head that trickles in byte by byte, then a body in the same read as its end, is read right", () => {
    const { r, seen } = reader();
    const head = enc.encode(`HTTP/1.1 200 OK\r\nX-Pad: ${"p".repeat(3000)}\r\nContent-Length: 4\r\n\r`);
    for (const b of head) r.feed(Uint8Array.of(b));
    r.feed(enc.encode("\nbody"));
    expect(seen.heads[0]!.fields[0]![1]).toHaveLength(3000);
    expect(seen.body).toBe("body");
    expect(r.reusable).toBe(true);
  });

  test("bytes after the end of a response make the connection unusable", () => {
    const { r } = feedSplit("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokEXTRA", 0);
    expect(r.reusable).toBe(false);
  });

  test.each([
    ["a Content-Length body", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokEXTRA"],
    ["a chunked body", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\nEXTRA"],
    ["no body", "HTTP/1.1 204 No Content\r\n\r\nEXTRA"],
  ])("after %s, bytes in the same read already make it unusable when end() is called (the pool decides there)", (_what, wire) => {
    let atEnd: boolean | undefined;
    const r: ResponseReader = new ResponseReader({ head: () => {}, data: () => {}, end: () => (atEnd = r.reusable) });
    r.expect(false);
    r.feed(enc.encode(wire));
    expect(atEnd).toBe(false);
  });

  test("a second exchange on the same reader works after expect()", () => {
    const { r, seen } = feedSplit("HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\na", 0);
    r.expect(false);
    r.feed(enc.encode("HTTP/1.1 404 Not Found\r\nContent-Length: 1\r\n\r\nb"));
    expect(seen.heads.map((h) => h.status)).toEqual([200, 404]);
    expect(seen.body).toBe("ab");
    expect(seen.ends).toBe(2);
  });
});

describe("ResponseReader errors", () => {
  const bad = (wire: string) => () => feedSplit(wire, 0);
  test.each([
    ["a status line that is not HTTP/1.x", "HTP/1.1 200 OK\r\n\r\n"],
    ["a status code out of range", "HTTP/1.1 099 Odd\r\n\r\n"],
    ["a field with no colon", "HTTP/1.1 200 OK\r\nno colon here\r\n\r\n"],
    ["obs-fold", "HTTP/1.1 200 OK\r\nX-A: 1\r\n continued\r\n\r\n"],
    ["space before the colon", "HTTP/1.1 200 OK\r\nX-A : 1\r\n\r\n"],
    ["two different Content-Lengths", "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n"],
    ["a negative Content-Length", "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n"],
    ["a chunk size that is not hex", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"],
    ["a chunk not followed by CRLF", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\naXY"],
    ["101 Switching Protocols to a plain request", "HTTP/1.1 101 Switching Protocols\r\n\r\n"],
    ["a Content-Length followed by a vertical tab", "HTTP/1.1 200 OK\r\nContent-Length: 5\v\r\n\r\nhello"],
    ["a Content-Length followed by a form feed", "HTTP/1.1 200 OK\r\nContent-Length: 5\f\r\n\r\nhello"],
    ["a Content-Length past 2^53", "HTTP/1.1 200 OK\r\nContent-Length: 9007199254740993\r\n\r\n"],
    ["a chunk size of 2^48", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n01000000000000\r\n"],
    ["a bare LF in a chunk extension", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;a\nhello\r\n0\r\n\r\n"],
    ["a bare LF ending a chunk size line", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\nhello\r\n0\r\n\r\n"],
    ["a control byte in a chunk extension", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;a\u0000\r\nhello\r\n0\r\n\r\n"],
    ["a bare LF inside a field line", "HTTP/1.1 200 OK\r\nX-A: 1\nContent-Length: 2\r\n\r\nok"],
    ["a bare CR inside a field line", "HTTP/1.1 200 OK\r\nX-A: 1\rX-B: 2\r\nContent-Length: 0\r\n\r\n"],
    ["a vertical tab in a field value", "HTTP/1.1 200 OK\r\nX-A: a\vb\r\nContent-Length: 0\r\n\r\n"],
    ["a field name that is not a token", "HTTP/1.1 200 OK\r\nX A: 1\r\nContent-Length: 0\r\n\r\n"],
    ["a NUL in a field value", "HTTP/1.1 200 OK\r\nX-A: 1\u0000\r\nContent-Length: 0\r\n\r\n"],
    ["a bare LF in a trailer line", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX-T: 1\nX-U: 2\r\n\r\n"],
    ["chunked applied twice", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, chunked\r\n\r\n"],
  ])("%s is a ProtocolError", (_what, wire) => {
    expect(bad(wire)).toThrow(ProtocolError);
  });

  test.each([
    ["gzip", "gzip"],
    ["gzip, chunked", "gzip, chunked"],
    ["chunked, then gzip in a second field", "chunked\r\nTransfer-Encoding: gzip"],
    ["identity", "identity"],
  ])("Transfer-Encoding: %s is refused, naming the coding", (_what, te) => {
    expect(bad(`HTTP/1.1 200 OK\r\nTransfer-Encoding: ${te}\r\n\r\n`)).toThrow(/transfer coding (gzip|identity)\b/);
  });

  test("a chunked Transfer-Encoding in any case and with empty list elements is still just chunked", () => {
    eachCut("HTTP/1.1 200 OK\r\nTransfer-Encoding: , Chunked ,\r\n\r\n2\r\nok\r\n0\r\n\r\n", ({ seen }) => expect(seen.body).toBe("ok"));
  });

  test("a head larger than the limit is refused before it is complete", () => {
    const { r } = reader();
    r.feed(enc.encode("HTTP/1.1 200 OK\r\n"));
    expect(() => r.feed(enc.encode(`X-Big: ${"a".repeat(MAX_HEAD_BYTES)}`))).toThrow(/larger|longer/);
  });

  test("the connection closing mid-body, mid-head or before any answer says which", () => {
    const mid = feedSplit("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", 0);
    expect(() => mid.r.eof()).toThrow("upstream closed the connection in the middle of the response body");
    const head = reader();
    head.r.feed(enc.encode("HTTP/1.1 200"));
    expect(() => head.r.eof()).toThrow("in the middle of the response head");
    expect(() => reader().r.eof()).toThrow("before answering");
  });
});
