# The epp image where Docker Hub and gcr.io are reachable: a Rust build stage, then the release binary on a
# distroless base, non-root (UID/GID 65532, as the Helm chart's securityContext expects), no shell, no
# package manager. epp writes no files (even its self-signed certificate lives in memory), so the chart's
# read-only root filesystem suits it.
#
#   docker build -t registry.example/epp:0.1.0 .
#
# No `# syntax=` line: BuildKit would fetch that frontend from Docker Hub; its built-in one reads this file.
# Where no registry is reachable (this repository's CI), `make image` builds the same image from Debian's
# packages and the release binary instead (deploy/image/Containerfile, scripts/build-image.sh).

# Build stage: the workspace's pinned Cargo.lock, only the epp binary. The Rust version is at least the
# workspace's rust-version (1.89: AVX-512 intrinsics).
FROM rust:1.89-bookworm AS build
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p epp --bin epp \
 && install -D -m 0755 target/release/epp /out/epp

# Run stage: glibc and libgcc (the binary links them dynamically), CA certificates (HTTPS scrapes with
# verification), the nonroot user.
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /out/epp /epp
USER 65532:65532
# ext_proc (gRPC), gRPC health, Prometheus /metrics: the defaults of --grpc-port, --grpc-health-port,
# --metrics-port and the chart's ports.
EXPOSE 9002 9003 9090
ENTRYPOINT ["/epp"]
