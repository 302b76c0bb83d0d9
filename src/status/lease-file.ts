/**
 * The GPU lease kept on disk (SPEC "Restarts"), so a lease outlives a restart of the turnstile
 * until its TTL: a training run that holds the card for 12 h must not lose it to a crash or an
 * update. One file per pair of upstreams guarded, under STATE_DIR, mode 0600, replaced whole
 * (written beside, then renamed) so a crash mid-write leaves the old lease or the new, never half.
 */
import { lstatSync, mkdirSync, renameSync, rmSync, unlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { readTextBounded } from "../config/read-bounded.ts";
import { redactUrl } from "../config/redact.ts";
import { normalizeUpstream } from "../runtime/card-claim.ts";
import type { StoredLease } from "./steer.ts";

/** A kept lease is a few hundred bytes; a larger file is refused unread (said, and kept as no lease). */
export const LEASE_FILE_MAX_BYTES = 64 << 10;

export interface Guarded {
  ollamaUrl: string;
  comfyUrl: string;
}

/**
 * An upstream as the key sees it, spelled as the card claim spells it: no credentials (a new
 * password is the same card), the port always written, no trailing slash.
 */
function normalized(url: string): string {
  if (!url) return "";
  try {
    return normalizeUpstream(url);
  } catch {
    return url;
  }
}

/** `lease-<16 hex>.json`: two instances guarding different cards never share a lease. */
export function leaseFileName(g: Guarded): string {
  const key = `ollama=${normalized(g.ollamaUrl)}\ncomfy=${normalized(g.comfyUrl)}`;
  return `lease-${new Bun.CryptoHasher("sha256").update(key).digest("hex").slice(0, 16)}.json`;
}

const isString = (v: unknown): v is string => typeof v === "string";
const isTime = (v: unknown): v is number => typeof v === "number" && Number.isFinite(v) && v >= 0;

/** The file's lease, or null when it holds none; throws when it is not a lease file. */
export function parseLeaseFile(text: string): StoredLease | null {
  const body = JSON.parse(text) as { lease?: unknown } | null;
  if (typeof body !== "object" || body === null || !("lease" in body)) throw new Error("no lease field");
  const l = body.lease as Record<string, unknown> | null;
  if (l === null) return null;
  if (typeof l !== "object" || !isString(l.id) || !isString(l.holder) || !isString(l.by) || !isTime(l.since) || !isTime(l.expires_at) || !isTime(l.ttl_ms)) {
    throw new Error("not a lease");
  }
  return { id: l.id, holder: l.holder, by: l.by, since: l.since, expires_at: l.expires_at, ttl_ms: l.ttl_ms };
}

export function renderLeaseFile(lease: StoredLease, g: Guarded): string {
  // The upstreams are written for whoever opens the folder, masked: the key alone says nothing.
  const upstreams = { ollama: redactUrl(g.ollamaUrl), comfy: redactUrl(g.comfyUrl) };
  return `${JSON.stringify({ upstreams, lease }, null, 2)}\n`;
}

export interface LeaseFileLog {
  warn(msg: string, fields?: Record<string, unknown>): void;
}

export class LeaseFile {
  readonly path: string;

  constructor(
    private readonly dir: string,
    private readonly guarded: Guarded,
    private readonly log: LeaseFileLog,
  ) {
    this.path = join(dir, leaseFileName(guarded));
  }

  /** The lease kept by the last run, if any. An unreadable file is said and treated as none. */
  load(): StoredLease | null {
    let text: string;
    try {
      // Only a plain file of this user's: a link, or a file someone else put in a STATE_DIR others
      // may write, would let them hold the card (or have another file read and quoted in the log).
      const st = lstatSync(this.path);
      const uid = process.getuid?.();
      if (!st.isFile() || (uid !== undefined && st.uid !== uid)) {
        this.#warn("the kept GPU lease file is not a plain file of this user's; ignored", new Error(st.isFile() ? `owned by uid ${st.uid}` : "not a plain file"));
        return null;
      }
      text = readTextBounded(this.path, LEASE_FILE_MAX_BYTES);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "ENOENT") this.#warn("could not read the kept GPU lease", err);
      return null;
    }
    try {
      return parseLeaseFile(text);
    } catch (err) {
      this.#warn("the kept GPU lease file is damaged; ignored", err);
      return null;
    }
  }

  /** Keeps `lease`, or removes the file for none. Never throws: a failure is said, the lease goes on. */
  save(lease: StoredLease | null): void {
    try {
      if (lease === null) return void unlinkSync(this.path);
      mkdirSync(this.dir, { recursive: true, mode: 0o700 });
      const tmp = `${this.path}.${process.pid}.tmp`;
      // A leftover (or a link planted in a folder others may write) goes; the file is then made
      // new and exclusively (O_EXCL follows no link), so mode 0600 is its own and nothing else is written.
      rmSync(tmp, { force: true });
      writeFileSync(tmp, renderLeaseFile(lease, this.guarded), { mode: 0o600, flag: "wx" });
      renameSync(tmp, this.path);
    } catch (err) {
      if (lease === null && (err as NodeJS.ErrnoException).code === "ENOENT") return;
      this.#warn(lease ? "could not keep the GPU lease on disk: it will not survive a restart" : "could not remove the ended GPU lease from disk", err);
    }
  }

  #warn(msg: string, err: unknown): void {
    this.log.warn(msg, { file: this.path, reason: err instanceof Error ? err.message : String(err) });
  }
}
