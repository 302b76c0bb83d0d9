import { describe, expect, test } from "bun:test";
import { redactCredentials, redactUrl } from "../../src/config/redact.ts";

describe("redactUrl / redactCredentials", () => {
  test("user and password, a user alone (a token), any scheme: the whole user-info is masked", () => {
    expect(redactUrl("http://admin:S3cretPW@127.0.0.1:11435")).toBe("http://***@127.0.0.1:11435");
    expect(redactUrl(new URL("https://tok3n@comfy.lan/base/"))).toBe("https://***@comfy.lan/base/");
    expect(redactUrl("ws://a%40b:p%3Aw@h:1/ws")).toBe("ws://***@h:1/ws");
  });

  test("URLs without credentials, and @ outside the authority, are left alone", () => {
    for (const s of ["http://127.0.0.1:11435", "http://h/path@x", "http://h/?q=a@b", "mail me: a@b.c", "", "http://h#x@y"]) {
      expect(redactCredentials(s)).toBe(s);
    }
  });

  test("every URL in free text, quoted or not", () => {
    expect(redactCredentials(`got "http://u:p@h:1" and http://v:q@k/x, then {"u":"https://w:r@m"}`)).toBe(
      `got "http://***@h:1" and http://***@k/x, then {"u":"https://***@m"}`,
    );
  });

  test("a password holding `@` or `'` is masked up to the last `@` of the authority", () => {
    expect(redactCredentials("upstream=http://admin:p@ss'w@127.0.0.1:1/x@y")).toBe("upstream=http://***@127.0.0.1:1/x@y");
  });

  test("a URL value without its scheme (a config mistake) is masked as a parser would read it", () => {
    expect(redactUrl("admin:S3cret@127.0.0.1:1")).toBe("***@127.0.0.1:1");
    expect(redactUrl("http://admin:pa ss@127.0.0.1:1")).toBe("http://***@127.0.0.1:1");
    expect(redactUrl("127.0.0.1:1/a@b")).toBe("127.0.0.1:1/a@b");
  });
});
