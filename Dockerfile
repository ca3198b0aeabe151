# syntax=docker/dockerfile:1
# Veltrix in a container: `docker build -t veltrix .` then
#   docker run -p 7100:7100 -v veltrix-data:/data veltrix
# The build stage compiles the release binary; the runtime stage is distroless (glibc and
# libgcc, no shell, no package manager: the binary links nothing else, zlib included, which
# tests/container.rs checks) and runs as the unprivileged `nonroot` user (65532).
# tests/container.rs runs the binary with this file's ENTRYPOINT, CMD, ENV and HEALTHCHECK, so
# the two cannot drift.
#
# The dependencies get a layer of their own, rebuilt only when a manifest or the lock file
# changes, made by cargo-chef (`prepare` derives a recipe from the workspace: every member's
# manifest, its targets and the lock file; `cook` rebuilds that skeleton with stub sources and
# compiles the dependencies, then removes the stubs' own artifacts). A hand-kept list of the
# members' manifests here went stale as members were added; the recipe follows Cargo.toml.
# tests/container.rs runs these steps (`--no-build`) on a copy of the build context and loads
# the skeleton with cargo; scripts/test installs the cargo-chef version pinned below.

FROM rust:1.95-bookworm AS chef
RUN cargo install cargo-chef --locked --version 0.1.78
WORKDIR /src

FROM chef AS planner
COPY . .
RUN cargo chef prepare --recipe-path recipe.json

FROM chef AS build
COPY --from=planner /src/recipe.json recipe.json
RUN cargo chef cook --release --locked -p veltrix --recipe-path recipe.json
# The sources, and the binary.
COPY . .
RUN cargo build --release --locked -p veltrix \
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
