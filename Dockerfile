# sluice's container image: a static binary on a distroless base, run as a
# non-root user, with no shell.
#
#   docker build -t sluice .
#   docker run --rm -p 8080:8080 -p 8081:8081 sluice
#   docker run --rm -p 8080:8080 -p 8081:8081 -v "$PWD/examples/config:/etc/sluice:ro" sluice
#
# Ports: 8080 HTTP (POST /json, POST /v1/check, GET /v1/auth, /healthz,
# /readyz, /metrics) and 8081 gRPC (Envoy's ShouldRateLimit, health).
# Configuration: the files of /etc/sluice (examples/config/ is built in;
# mount your own directory or ConfigMap over it). Flags follow the image
# name, e.g. serve --config /etc/sluice --redis redis://redis:6379, or come
# from SLUICE_* variables.
#
# The binary is also /bin/ratelimit, the command that Envoy Gateway's
# rate-limit Deployment and the common charts run: under that name it is
# sluice serve, configured by envoyproxy/ratelimit's environment variables
# (docs/reference-env.md), so that this image replaces that one as it is.
#
# The binary is built by the Makefile's binary target, the command
# make release runs for each platform.

FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG TARGETOS=linux
ARG TARGETARCH=amd64
ARG VERSION=devel
ARG COMMIT=
RUN make binary GOOS=$TARGETOS GOARCH=$TARGETARCH BIN=/out/sluice VERSION=$VERSION COMMIT=$COMMIT

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/sluice /sluice
COPY --from=build /out/sluice /bin/ratelimit
COPY examples/config/ /etc/sluice/
COPY LICENSE NOTICE /
USER nonroot:nonroot
EXPOSE 8080 8081
ENTRYPOINT ["/sluice"]
CMD ["serve", "--config", "/etc/sluice"]
