# One image with trustsync's five component binaries and its kubectl plugin (which the
# chart's helm test runs), built from source:
#   /trustsync-webhook, /trustsync-sidecar, /trustsync-signer, /trustsync-controller,
#   /trustsync-agent, /kubectl-trustsync
# Multi-stage: Go builds static binaries; the final stage is distroless static,
# non-root (uid 65532), with nothing else in it.
#
#   docker build -t ghcr.io/trustsync/trustsync:v0.1.0 .
# (`make image` prints this; no container engine is needed to build or test trustsync.)

FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN for b in trustsync-webhook trustsync-sidecar trustsync-signer trustsync-controller trustsync-agent kubectl-trustsync; do \
      CGO_ENABLED=0 go build -trimpath -ldflags="-s -w -X github.com/trustsync/trustsync/buildinfo.Version=$(cat VERSION)" -o /out/$b ./cmd/${b#trustsync-} || exit 1; \
    done

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/ /
USER 65532:65532
ENTRYPOINT ["/trustsync-webhook"]
