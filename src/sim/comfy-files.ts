/**
 * The simulated ComfyUI's files: job outputs, uploads and a fixed 8 MiB "big.png" for download
 * benchmarks. Generated files are deterministic bytes behind a PNG signature (PNG-ish: clients
 * sniffing the type see a PNG; nobody decodes them) produced on demand, so they cost no memory.
 */
export type FileType = "output" | "input" | "temp";

/** Served by /view?filename=big.png: the benchmark download. */
export const BIG_FILE = { name: "big.png", size: 8 * 1024 * 1024 };

const PNG_SIGNATURE = [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a];

/** Deterministic PNG-ish bytes of exactly `size` bytes, seeded by `name`. */
export function pngBlob(name: string, size: number): Uint8Array<ArrayBuffer> {
  const words = new Uint32Array(Math.ceil(size / 4));
  let s = 2166136261;
  for (let i = 0; i < name.length; i++) s = Math.imul(s ^ name.charCodeAt(i), 16777619) >>> 0;
  s ||= 1;
  for (let i = 0; i < words.length; i++) {
    s ^= s << 13;
    s >>>= 0;
    s ^= s >>> 17;
    s ^= s << 5;
    s >>>= 0;
    words[i] = s;
  }
  const bytes = new Uint8Array(words.buffer, 0, size);
  bytes.set(PNG_SIGNATURE.slice(0, size));
  return bytes;
}

type Entry = { bytes: Uint8Array<ArrayBuffer> } | { size: number };

export class FileStore {
  private readonly files = new Map<string, Entry>();
  private bigCache: Uint8Array<ArrayBuffer> | undefined;

  constructor(private readonly outputBytes: number) {
    this.files.set(key("output", "", BIG_FILE.name), { size: BIG_FILE.size });
  }

  has(type: FileType, subfolder: string, name: string): boolean {
    return this.files.has(key(type, subfolder, name));
  }

  get(type: FileType, subfolder: string, name: string): Uint8Array<ArrayBuffer> | undefined {
    const e = this.files.get(key(type, subfolder, name));
    if (!e) return undefined;
    if ("bytes" in e) return e.bytes;
    if (name === BIG_FILE.name && type === "output" && subfolder === "") {
      this.bigCache ??= pngBlob(name, e.size);
      return this.bigCache;
    }
    return pngBlob(`${type}/${subfolder}/${name}`, e.size);
  }

  put(type: FileType, subfolder: string, name: string, bytes: Uint8Array<ArrayBuffer>): void {
    this.files.set(key(type, subfolder, name), { bytes });
  }

  /** A job output: registered now, generated when someone downloads it. */
  addOutput(type: FileType, name: string): void {
    this.files.set(key(type, "", name), { size: this.outputBytes });
  }
}

function key(type: string, subfolder: string, name: string): string {
  return `${type}\u0000${subfolder}\u0000${name}`;
}
