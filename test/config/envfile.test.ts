import { describe, expect, test } from "bun:test";
import { EnvFileError, formatEnvValue, parseEnvFile } from "../../src/config/envfile.ts";

const F = "/etc/gpu-turnstile.env";
const parse = (text: string) => parseEnvFile(text, F).map(({ key, value, line }) => [key, value, line]);
const only = (text: string) => parseEnvFile(text, F)[0]?.value;

describe("parseEnvFile accepts", () => {
  test("KEY=VALUE lines with comments and blank lines, keeping line numbers", () => {
    const text = "# header\n\nOLLAMA_URL=http://127.0.0.1:11435\n   # indented comment\nLOGLEVEL=info\n";
    expect(parse(text)).toEqual([
      ["OLLAMA_URL", "http://127.0.0.1:11435", 3],
      ["LOGLEVEL", "info", 5],
    ]);
  });

  test("whitespace around key and '=' and trailing whitespace", () => {
    expect(parse("  UNLOAD_TIMEOUT \t=   90s  \t")).toEqual([["UNLOAD_TIMEOUT", "90s", 1]]);
  });

  test("an optional leading export", () => {
    expect(parse("export LOG_FORMAT=json\nexport\tWARM_MODEL=llama3")).toEqual([
      ["LOG_FORMAT", "json", 1],
      ["WARM_MODEL", "llama3", 2],
    ]);
  });

  test("a key named export is still a key", () => expect(parse("export=1")).toEqual([["export", "1", 1]]));

  test("CRLF line ends and a UTF-8 BOM", () => {
    expect(parse("\ufeffCFG_VER=v1.0.0\r\n# c\r\nLOGLEVEL=debug\r\n")).toEqual([
      ["CFG_VER", "v1.0.0", 1],
      ["LOGLEVEL", "debug", 3],
    ]);
  });

  test("no final line end", () => expect(parse("A=1\nB=2")).toEqual([["A", "1", 1], ["B", "2", 2]]));

  test("empty values", () => {
    expect(only("WARM_MODEL=")).toBe("");
    expect(only('WARM_MODEL=""')).toBe("");
    expect(only("WARM_MODEL=''")).toBe("");
  });

  test("unquoted values are literal: backslashes, inner spaces, = and # inside a word", () => {
    expect(only("LOG_FILE=C:\\ProgramData\\gpu-turnstile\\new.log")).toBe("C:\\ProgramData\\gpu-turnstile\\new.log");
    expect(only("LOG_FILE=C:\\Program Files\\x.log")).toBe("C:\\Program Files\\x.log");
    expect(only("X=a=b")).toBe("a=b");
    expect(only("X=a#b")).toBe("a#b");
    expect(only("X=it's")).toBe("it's");
  });

  test("single quotes are literal", () => {
    expect(only("X='a \\n \\\" # b'")).toBe('a \\n \\" # b');
    expect(only("X = '  spaced  '  ")).toBe("  spaced  ");
  });

  test('double quotes unescape \\" \\\\ \\$ \\` and keep every other backslash', () => {
    expect(only('X="say \\"hi\\" \\\\ \\$HOME \\`x\\`"')).toBe('say "hi" \\ $HOME `x`');
    expect(only('LOG_FILE="C:\\new\\table.log"')).toBe("C:\\new\\table.log");
    expect(only('X="a # not a comment"')).toBe("a # not a comment");
  });
});

describe("parseEnvFile rejects, naming file and line", () => {
  const cases: Array<[string, string, number, RegExp]> = [
    ["no =", "A=1\n\nJUST_A_WORD\n", 3, /expected KEY=VALUE, got "JUST_A_WORD"/],
    ["export without =", "export FOO\n", 1, /expected KEY=VALUE/],
    ["empty key", "=value\n", 1, /invalid key ""/],
    ["key with a dash", "A=1\nLOG-LEVEL=info\n", 2, /invalid key "LOG-LEVEL"/],
    ["key starting with a digit", "1KEY=x", 1, /invalid key "1KEY"/],
    ["key with a space", "MY KEY=x", 1, /invalid key "MY KEY"/],
    ["unterminated double quote", 'A=1\nB="open\nC=3', 2, /B: unterminated double quote/],
    ["escaped closing quote only", 'B="open\\"', 1, /B: unterminated double quote/],
    ["unterminated single quote", "A='x", 1, /A: unterminated single quote/],
    ["text after a closing quote", 'A="x" y', 1, /A: unexpected "y" after the closing quote/],
    ["comment after a closing quote", "A='x' # note", 1, /A: unexpected "# note" after the closing quote/],
    ["inline comment", "\n\nUNLOAD_TIMEOUT=90s   # slow disk\n", 3, /UNLOAD_TIMEOUT: inline comments are not supported .*"# slow disk"/],
    ["comment as the whole value", "WARM_MODEL= # none", 1, /WARM_MODEL: inline comments are not supported/],
    ["CRLF file keeps line numbers", "A=1\r\nB\r\n", 2, /expected KEY=VALUE, got "B"/],
  ];
  for (const [name, text, line, why] of cases) {
    test(name, () => {
      let err: unknown;
      try {
        parseEnvFile(text, F);
      } catch (e) {
        err = e;
      }
      expect(err).toBeInstanceOf(EnvFileError);
      const e = err as EnvFileError;
      expect(e.file).toBe(F);
      expect(e.line).toBe(line);
      expect(e.message.startsWith(`${F}:${line}: `)).toBe(true);
      expect(e.message).toMatch(why);
      expect(e.message).not.toContain("\n");
    });
  }
});

describe("formatEnvValue", () => {
  const values = [
    "",
    "plain",
    "C:\\ProgramData\\gpu-turnstile\\gpu-turnstile.log",
    "C:\\Program Files\\gpu-turnstile\\log.txt",
    "a # b",
    "#hash",
    " padded ",
    "it's",
    `both ' and " and \\ and $`,
    "`tick`",
  ];
  for (const v of values) {
    test(`${JSON.stringify(v)} reads back unchanged`, () => expect(only(`X=${formatEnvValue(v)}`)).toBe(v));
  }
  test("keeps Windows paths bare", () => {
    expect(formatEnvValue("C:\\ProgramData\\gpu-turnstile\\gpu-turnstile.log")).toBe(
      "C:\\ProgramData\\gpu-turnstile\\gpu-turnstile.log",
    );
  });
  test("refuses line breaks", () => expect(() => formatEnvValue("a\nb")).toThrow(RangeError));
});
