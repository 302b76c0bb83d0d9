# syntax=docker/dockerfile:1
# gpu-turnstile as a FROM scratch image: the compiled binary, the few shared libraries it links,
# a non-root user, CA certificates — nothing else (no shell, no package manager).
#
#   docker build --build-arg VERSION=v1.2.3 -t gpu-turnstile .
#
# scripts/rootfs.sh assembles the root folder; test/build/rootfs.test.ts runs the same script and
# starts the binary from the result in a chroot, so the image's contents are tested without Docker.

# --- build: the linux-x64 executable, with the project's pinned Bun (from npm ci) -------------
FROM node:20-bookworm-slim AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY . .
# No .git in the build context: the version comes from the tag CI passes in.
ARG VERSION=v0.0.0-dev+docker
RUN GPU_TURNSTILE_VERSION="$VERSION" npx bun build.ts --target linux-x64

# --- rootfs: what the final image holds, assembled on the same Debian the binary was linked for ---
FROM build AS rootfs
RUN sh scripts/rootfs.sh dist/gpu-turnstile-linux-x64 /rootfs

# --- final ---------------------------------------------------------------------------------------
FROM scratch
COPY --from=rootfs /rootfs /
USER 65532:65532
EXPOSE 8188 11434
# A container is updated by pulling a new tag, never by replacing its own binary.
ENV AUTO_UPDATE=false
# Bun reads its fetch concurrency limit (default 256) only at process start; set it here so the
# binary does not re-run itself to lift it (see SPEC.md, "Bun's fetch concurrency limit").
ENV BUN_CONFIG_MAX_HTTP_REQUESTS=65535
ENTRYPOINT ["/gpu-turnstile"]
