# syntax=docker/dockerfile:1
# Veltrix in a container: `docker build -t veltrix .` then
#   docker run -p 7100:7100 -v veltrix-data:/data veltrix
# The build stage compiles the release binary (dependencies in a layer of their own, rebuilt only
# when a manifest or the lock file changes); the runtime stage is distroless (glibc and libgcc,
# no shell, no package manager) and runs as the unprivileged `nonroot` user (65532).
# tests/container.rs runs the binary with this file's ENTRYPOINT, CMD, ENV and HEALTHCHECK, so
# the two cannot drift.

FROM rust:1.95-bookworm AS build
WORKDIR /src
# The dependency layer: the workspace's manifests with empty sources.
COPY Cargo.toml Cargo.lock ./
COPY proto/Cargo.toml proto/
COPY ingest/Cargo.toml ingest/
COPY router/Cargo.toml router/
COPY storage/Cargo.toml storage/
COPY client/Cargo.toml client/
COPY loadtest/Cargo.toml loadtest/
RUN mkdir -p src proto/src proto/benches ingest/src router/src storage/src client/src loadtest/src \
 && for f in src/lib.rs proto/src/lib.rs ingest/src/lib.rs router/src/lib.rs storage/src/lib.rs \
      client/src/lib.rs loadtest/src/lib.rs; do : > "$f"; done \
 && for f in src/main.rs loadtest/src/main.rs proto/benches/decode.rs; do echo 'fn main() {}' > "$f"; done \
 && cargo build --release --locked -p veltrix \
 && rm -rf src proto/src proto/benches ingest/src router/src storage/src client/src loadtest/src
# The sources, and the binary.
COPY . .
RUN touch src/main.rs src/lib.rs proto/src/lib.rs ingest/src/lib.rs router/src/lib.rs \
      storage/src/lib.rs client/src/lib.rs \
 && cargo build --release --locked -p veltrix \
 && install -D target/release/veltrix /out/usr/local/bin/veltrix \
 && mkdir -p /out/data

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /out/usr/local/bin/veltrix /usr/local/bin/veltrix
COPY --from=build --chown=65532:65532 /out/data /data
USER 65532:65532
# Listen on every interface inside the container; data on the volume. Without auth.tokens the
# server warns that a non-loopback address is open to anyone who can reach it: configure
# tokens (a config file mounted at /etc/veltrix/veltrix.yaml, VX_CONFIG) for anything shared.
ENV VX_SERVER_LISTEN=0.0.0.0:7100 \
    VX_STORAGE_DATA_DIR=/data
EXPOSE 7100
VOLUME ["/data"]
# SIGTERM drains (readiness off, followers ended, queues written, fsync, snapshot) and exits 0
# within server.shutdown_timeout (30 s): give `docker stop` more than that (`-t 40`).
STOPSIGNAL SIGTERM
# `veltrix health` asks http://127.0.0.1:7100/readyz (its default --server): 503 while
# recovering, draining or after a failed fsync.
HEALTHCHECK --interval=10s --timeout=3s --start-period=60s --retries=3 \
    CMD ["/usr/local/bin/veltrix", "health"]
ENTRYPOINT ["/usr/local/bin/veltrix"]
CMD ["serve"]
