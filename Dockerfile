# syntax=docker/dockerfile:1.7
#
# forgerunner operator image: a static musl binary on distroless (no shell, no package manager).
#
#   docker build -t forgerunner:dev .
#   docker buildx build --platform linux/amd64,linux/arm64 -t ghcr.io/forgerunner/forgerunner:0.1.0 --push .
#
# Build args: FEATURES picks the compiled-in forges (cargo features of crates/operator). The
# default is every forge, the operator crate's default features, so the image serves the chart's
# default forges.enabled (tests/chart/test_image.py checks both). E.g.
#   --build-arg FEATURES=gitea   for a Gitea-only image (then set forges.enabled={gitea}).
# See docs/image.md.

ARG RUST_VERSION=1.95

FROM rust:${RUST_VERSION}-bookworm AS build
ARG TARGETARCH
ARG FEATURES=github,gitea,forgejo
# musl-tools gives the C toolchain ring needs for a static build.
RUN apt-get update \
 && apt-get install -y --no-install-recommends musl-tools \
 && rm -rf /var/lib/apt/lists/*
# One image platform = one musl target; buildx runs this stage on each target platform.
RUN case "${TARGETARCH:-amd64}" in \
      amd64) echo x86_64-unknown-linux-musl > /rust-target ;; \
      arm64) echo aarch64-unknown-linux-musl > /rust-target ;; \
      *) echo "unsupported TARGETARCH ${TARGETARCH}" >&2; exit 1 ;; \
    esac \
 && rustup target add "$(cat /rust-target)"
WORKDIR /src
COPY . .
# Cache mounts keep the registry and build artefacts between builds without putting them in a layer.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    target="$(cat /rust-target)" \
 && cargo build --release --locked -p forgerunner --no-default-features --features "${FEATURES}" --target "${target}" \
 && install -D -m 0755 "target/${target}/release/forgerunner" /out/forgerunner \
 && /out/forgerunner version

# distroless/static: CA certificates, tzdata and a nonroot user (65532), nothing else.
FROM gcr.io/distroless/static-debian12:nonroot
LABEL org.opencontainers.image.title="forgerunner" \
      org.opencontainers.image.description="Kubernetes operator that autoscales ephemeral CI runners for GitHub, Gitea and Forgejo" \
      org.opencontainers.image.source="https://github.com/forgerunner/forgerunner" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /out/forgerunner /forgerunner
USER nonroot:nonroot
EXPOSE 8080
ENTRYPOINT ["/forgerunner"]
CMD ["run"]
