/**
 * The JSON calls the llama-server, llama-swap, LM Studio and vLLM drivers make: on the proxy's
 * pooled connections (upstream/http.ts's callJson), plus the Bearer token LM Studio may require,
 * and the one reading of a listing that every verify makes (unreadable → held, refused on this
 * machine → not running).
 */
import { poolFor } from "../upstream/h1-pool.ts";
import { callJson, isRecord, joinUrl, parseJson, UpstreamHttpError } from "../upstream/http.ts";
import { describeFetchError, isConnectionRefused } from "../upstream/upstream-errors.ts";
import type { Holding, Resident } from "./types.ts";

export interface TenantCall {
  signal: AbortSignal;
  /** JSON body; a POST when present (or when `method` says so). */
  body?: unknown;
  method?: string;
  /** `Authorization: Bearer <token>` (LM Studio). */
  token?: string;
}

/** A bound far above any step's own: the step's signal is what ends a call. */
const NO_TIMEOUT_MS = 2 ** 31 - 1;

/** One call; any status. */
export async function tenantCall(base: URL, path: string, o: TenantCall): Promise<{ status: number; text: string }> {
  if (!o.token) return callJson(base, path, { timeoutMs: NO_TIMEOUT_MS, signal: o.signal, body: o.body, method: o.method });
  const method = o.method ?? (o.body === undefined ? "GET" : "POST");
  const body = o.body === undefined ? undefined : JSON.stringify(o.body);
  const headers = new Headers({ authorization: `Bearer ${o.token}` });
  if (body !== undefined) headers.set("content-type", "application/json");
  const url = joinUrl(base, path);
  if (base.protocol !== "http:") {
    const res = await fetch(url, { method, headers, body, signal: o.signal });
    return { status: res.status, text: await res.text() };
  }
  headers.set("host", base.host);
  const res = await poolFor(base).request({
    method,
    target: url.slice(base.origin.length),
    headers,
    body: body === undefined ? undefined : Buffer.from(body),
    signal: o.signal,
  });
  return { status: res.status, text: await res.text() };
}

/** A 2xx JSON answer, or an error naming the call (an UpstreamHttpError for a status). */
export async function tenantJson(base: URL, path: string, o: TenantCall): Promise<unknown> {
  const what = `${o.method ?? (o.body === undefined ? "GET" : "POST")} ${path}`;
  const { status, text } = await tenantCall(base, path, o);
  if (status < 200 || status > 299) throw new UpstreamHttpError(status, text, what);
  const v = parseJson(text);
  if (v === undefined) throw new Error(`${what}: not JSON: ${text.slice(0, 120)}`);
  return v;
}

/** A listing's records under `key` (`data`, `models`, `running`); an error when the shape is not one. */
export function listOf(v: unknown, key: string, what: string): Record<string, unknown>[] {
  const list = isRecord(v) ? v[key] : undefined;
  if (!Array.isArray(list)) throw new Error(`${what}: no "${key}" list in the answer`);
  return list.filter(isRecord);
}

/**
 * One verify reading: `read` lists what the tenant holds by its own account. A listing that cannot
 * be read counts as held (fail closed), unless the tenant runs on this machine and refuses
 * connections: then its process is gone and holds nothing.
 */
export async function holdingFrom(read: () => Promise<Resident[]>, what: string, local: boolean, signal: AbortSignal): Promise<Holding> {
  try {
    const residents = await read();
    return { held: residents.length > 0, residents };
  } catch (err) {
    if (signal.aborted) throw err;
    if (local && isConnectionRefused(err)) return { held: false, notRunning: describeFetchError(err) };
    return { held: true, unreadable: `${what} unreadable: ${describeFetchError(err)}` };
  }
}

/** Sends one release call per item; a thrown answer becomes the error, as the contract wants. */
export async function releaseEach(items: string[], signal: AbortSignal, one: (item: string) => Promise<boolean>): Promise<{ accepted: boolean; error?: string }> {
  let accepted = true;
  let error: string | undefined;
  for (const item of items) {
    try {
      if (!(await one(item))) {
        accepted = false;
        error ??= `${item}: the release was not answered as done`;
      }
    } catch (err) {
      if (signal.aborted) throw err;
      accepted = false;
      error ??= `${item}: ${describeFetchError(err)}`;
    }
  }
  return { accepted, error };
}
