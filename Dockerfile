# syntax=docker/dockerfile:1
#
# The xct image: one static binary, every service. The container's args pick
# what runs, e.g. `serve --target=validator --nats=nats://nats:4222`
# (deploy/k8s does this for each service). Build it with `make image`.

# Build stage: compile for the target platform on the build platform.
FROM --platform=$BUILDPLATFORM golang:1.26.8 AS build
WORKDIR /src
# Modules first, so editing code does not download them again.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG TARGETOS
ARG TARGETARCH
RUN CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -trimpath -ldflags="-s -w" -o /out/xct ./cmd/xct

# Final stage: no shell, no package manager; CA certificates and tzdata only.
FROM gcr.io/distroless/static-debian12:nonroot
LABEL org.opencontainers.image.title="xct" \
      org.opencontainers.image.description="XCT: governed execution for LLM agents (orchestrator, validator, executor, tracer)"
COPY --from=build /out/xct /usr/local/bin/xct
# nonroot (65532) owns its home, so `xct dev` can keep its .xct there.
WORKDIR /home/nonroot
USER 65532:65532
# gRPC: orchestrator, validator, executor, tracer.
EXPOSE 7701 7702 7703 7704
ENTRYPOINT ["/usr/local/bin/xct"]
CMD ["--help"]
