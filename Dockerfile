# syntax=docker/dockerfile:1
# Multi-stage: compile with the Rust toolchain, ship a slim Debian with what stdio MCP
# servers usually need (node/npx, python/uvx). Build: docker build -t mcp-pool .

FROM rust:1.95-bookworm AS build
# The image can export spans (set MCP_POOL__LOG__OTLP_ENDPOINT); `--build-arg FEATURES=`
# builds without the exporter.
ARG FEATURES=otlp
WORKDIR /src
COPY . .
# BuildKit caches keep the registry and the target directory between builds.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin mcp-pool --bin mcp-pool-egress --features "$FEATURES" \
    && cp target/release/mcp-pool target/release/mcp-pool-egress /usr/local/bin/

FROM debian:bookworm-slim
# tini as PID 1: grandchildren of stdio servers (npx, uvx spawn their own) that outlive
# their parent are re-parented to PID 1 and must be reaped by someone.
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates tini nodejs npm python3 python3-pip \
       bubblewrap \
    && pip3 install --no-cache-dir --break-system-packages uv \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --create-home --uid 10001 mcp \
    && mkdir -p /data && chown mcp /data
COPY --from=build /usr/local/bin/mcp-pool /usr/local/bin/mcp-pool-egress /usr/local/bin/
USER mcp
WORKDIR /home/mcp
ENV MCP_POOL__SERVER__HOST=0.0.0.0 \
    MCP_POOL__STORAGE__DATA_DIR=/data
VOLUME /data
EXPOSE 8080 50051
# Every stdio server runs in a bubblewrap sandbox, which needs user namespaces: Docker's
# default seccomp profile refuses them, so run with `--security-opt seccomp=unconfined`
# (or a profile allowing unshare/clone of namespaces) and, where AppArmor confines
# containers, `--security-opt apparmor=unconfined`; `GET /readyz` says whether servers
# are isolated. MCP_POOL__POOL__SANDBOX__MODE=off runs them unisolated instead.
# Probes: GET /healthz (alive), GET /readyz (database reachable); metrics at /metrics.
ENTRYPOINT ["/usr/bin/tini", "--", "/usr/local/bin/mcp-pool"]
CMD ["serve"]
