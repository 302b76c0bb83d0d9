/**
 * The two Gitea API calls the updater makes: the latest release of UPDATE_REPO, or the release
 * of one tag. Gitea's `/releases/latest` already leaves out drafts and pre-releases.
 */
import * as v from "valibot";
import { fetchLimited } from "./download.ts";
import type { FetchFn } from "./types.ts";
import { UpdateRefused } from "./types.ts";

export interface RepoRef {
  /** https://host[:port][/subpath] — where Gitea itself is served */
  base: string;
  /** host[:port]: the only host the updater talks to */
  host: string;
  owner: string;
  repo: string;
}

/** `https://host/owner/repo` (optionally under a subpath, trailing `/` or `.git`) → its parts. */
export function parseRepoUrl(text: string): RepoRef {
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    throw new UpdateRefused(`UPDATE_REPO is not a URL: ${JSON.stringify(text)}`);
  }
  const parts = url.pathname.replace(/\/+$/, "").replace(/\.git$/, "").split("/").filter((p) => p !== "");
  const repo = parts.pop();
  const owner = parts.pop();
  if (!owner || !repo || url.search || url.hash) {
    throw new UpdateRefused(`UPDATE_REPO must look like https://host/owner/repo, got ${JSON.stringify(text)}`);
  }
  const prefix = parts.length ? `/${parts.join("/")}` : "";
  return { base: `${url.protocol}//${url.host}${prefix}`, host: url.host, owner, repo };
}

export interface ReleaseAsset {
  name: string;
  size: number;
  url: string;
}

export interface Release {
  tag: string;
  prerelease: boolean;
  draft: boolean;
  assets: ReleaseAsset[];
}

const ReleaseJson = v.object({
  tag_name: v.string(),
  prerelease: v.optional(v.boolean(), false),
  draft: v.optional(v.boolean(), false),
  assets: v.optional(
    v.nullable(
      v.array(
        v.object({
          name: v.string(),
          size: v.pipe(v.number(), v.integer(), v.minValue(0)),
          browser_download_url: v.string(),
        }),
      ),
    ),
    [],
  ),
});

/** A release document is a few KiB; anything near this is not Gitea talking. */
const MAX_RELEASE_JSON = 1 << 20;

export type ReleaseQuery = { kind: "latest" } | { kind: "tag"; tag: string };

export function releaseApiUrl(repo: RepoRef, query: ReleaseQuery): string {
  const root = `${repo.base}/api/v1/repos/${encodeURIComponent(repo.owner)}/${encodeURIComponent(repo.repo)}/releases`;
  return query.kind === "latest" ? `${root}/latest` : `${root}/tags/${encodeURIComponent(query.tag)}`;
}

export async function fetchRelease(
  repo: RepoRef,
  query: ReleaseQuery,
  opts: { fetch: FetchFn; signal: AbortSignal; userAgent: string },
): Promise<Release> {
  const what = query.kind === "latest" ? "latest release" : `release ${query.tag}`;
  const body = await fetchLimited(releaseApiUrl(repo, query), {
    ...opts,
    what,
    allowedHost: repo.host,
    maxBytes: MAX_RELEASE_JSON,
    accept: "application/json",
    notFound: query.kind === "latest" ? `${repo.owner}/${repo.repo} has no published release` : `there is no release ${query.tag}`,
  });
  let json: unknown;
  try {
    json = JSON.parse(new TextDecoder().decode(body));
  } catch {
    throw new UpdateRefused(`${what}: the API answered with something that is not JSON`);
  }
  const parsed = v.safeParse(ReleaseJson, json);
  if (!parsed.success) {
    const issue = parsed.issues[0];
    const where = issue.path?.map((p) => String(p.key)).join(".") ?? "";
    throw new UpdateRefused(`${what}: unexpected release JSON (${where ? `${where}: ` : ""}${issue.message})`);
  }
  const r = parsed.output;
  return {
    tag: r.tag_name,
    prerelease: r.prerelease,
    draft: r.draft,
    assets: (r.assets ?? []).map((a) => ({ name: a.name, size: a.size, url: a.browser_download_url })),
  };
}
