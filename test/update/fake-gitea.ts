/**
 * A fake Gitea over real HTTP on 127.0.0.1: the two release endpoints and the attachment
 * downloads, with switches for the ways a download goes wrong (truncated, redirected, 404).
 * node:http rather than Bun.serve because a truncated body needs a socket closed mid-response.
 */
import * as http from "node:http";
import type { AddressInfo } from "node:net";

export type Serve =
  | { kind: "bytes"; body: Uint8Array }
  /** promise Content-Length of the full body, send `sendBytes` of it, then drop the connection */
  | { kind: "truncate"; body: Uint8Array; sendBytes: number }
  /** no Content-Length: the body arrives chunked, so only the byte limit can stop it */
  | { kind: "chunked"; body: Uint8Array }
  | { kind: "redirect"; location: string }
  | { kind: "status"; status: number };

export interface FakeAsset {
  name: string;
  serve: Serve;
  /** size reported in the release JSON; defaults to the body length */
  size?: number;
}

export interface FakeRelease {
  tag: string;
  prerelease?: boolean;
  draft?: boolean;
  assets: FakeAsset[];
}

export interface FakeGitea {
  /** http://127.0.0.1:<port> */
  origin: string;
  /** UPDATE_REPO for this fake */
  repoUrl: string;
  /** every request path, in order */
  requests: string[];
  setLatest(release: FakeRelease | null): void;
  addRelease(release: FakeRelease): void;
  close(): Promise<void>;
}

export const OWNER = "PUBLIC";
export const REPO = "gpu-turnstile";

export async function startFakeGitea(): Promise<FakeGitea> {
  let latest: FakeRelease | null = null;
  const byTag = new Map<string, FakeRelease>();
  const requests: string[] = [];
  const apiRoot = `/api/v1/repos/${OWNER}/${REPO}/releases`;

  const findAsset = (tag: string, name: string): FakeAsset | undefined => {
    const rel = byTag.get(tag) ?? (latest?.tag === tag ? latest : undefined);
    return rel?.assets.find((a) => a.name === name);
  };

  const server = http.createServer((req, res) => {
    const path = decodeURIComponent(new URL(req.url ?? "/", "http://x").pathname);
    requests.push(path);
    const json = (status: number, body: unknown): void => {
      const text = JSON.stringify(body);
      res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(text) });
      res.end(text);
    };
    if (path === `${apiRoot}/latest`) {
      return latest ? json(200, toJson(latest, origin())) : json(404, { message: "Not Found" });
    }
    if (path.startsWith(`${apiRoot}/tags/`)) {
      const rel = byTag.get(path.slice(`${apiRoot}/tags/`.length));
      return rel ? json(200, toJson(rel, origin())) : json(404, { message: "Not Found" });
    }
    const dl = /^\/PUBLIC\/gpu-turnstile\/releases\/download\/([^/]+)\/(.+)$/.exec(path);
    const asset = dl?.[1] && dl[2] ? findAsset(dl[1], dl[2]) : undefined;
    if (!asset) return json(404, { message: "Not Found" });
    const s = asset.serve;
    switch (s.kind) {
      case "bytes":
        res.writeHead(200, { "content-type": "application/octet-stream", "content-length": s.body.byteLength });
        return res.end(s.body);
      case "truncate":
        res.writeHead(200, { "content-type": "application/octet-stream", "content-length": s.body.byteLength });
        res.write(s.body.subarray(0, s.sendBytes), () => res.socket?.destroy());
        return;
      case "chunked":
        res.writeHead(200, { "content-type": "application/octet-stream" });
        for (let at = 0; at < s.body.byteLength; at += 1024) res.write(s.body.subarray(at, at + 1024));
        return res.end();
      case "redirect":
        res.writeHead(302, { location: s.location, "content-length": 0 });
        return res.end();
      case "status":
        return json(s.status, { message: "nope" });
    }
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const origin = (): string => `http://127.0.0.1:${(server.address() as AddressInfo).port}`;

  return {
    origin: origin(),
    repoUrl: `${origin()}/${OWNER}/${REPO}`,
    requests,
    setLatest(release) {
      latest = release;
    },
    addRelease(release) {
      byTag.set(release.tag, release);
    },
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

function toJson(r: FakeRelease, origin: string): unknown {
  return {
    id: 1,
    tag_name: r.tag,
    name: r.tag,
    prerelease: r.prerelease ?? false,
    draft: r.draft ?? false,
    assets: r.assets.map((a, i) => ({
      id: i + 1,
      name: a.name,
      size: a.size ?? bodyLength(a.serve),
      download_count: 0,
      browser_download_url: `${origin}/${OWNER}/${REPO}/releases/download/${encodeURIComponent(r.tag)}/${encodeURIComponent(a.name)}`,
    })),
  };
}

function bodyLength(s: Serve): number {
  return "body" in s ? s.body.byteLength : 0;
}
