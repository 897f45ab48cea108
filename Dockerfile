# Builds the controller and the webhook. Select the image with --target:
#   docker build --target controller -t dependency-controller .
#   docker build --target webhook -t dependency-webhook .
# (make docker-build builds both, tagged and labelled with VERSION.)

# OCI image labels; make docker-build sets them from VERSION and git.
ARG VERSION=dev
ARG REVISION=unknown
ARG SOURCE=https://github.com/opendefensecloud/dependency-controller

FROM golang:1.25 AS builder
ARG TARGETOS=linux
ARG TARGETARCH
WORKDIR /workspace

# Dependencies first, so that they are cached across source changes.
COPY go.mod go.sum ./
COPY staging/ staging/
RUN go mod download

COPY api/ api/
COPY cmd/ cmd/
COPY internal/ internal/
RUN CGO_ENABLED=0 GOOS=${TARGETOS} GOARCH=${TARGETARCH} \
    go build -trimpath -ldflags="-s -w" -o /out/ ./cmd/controller ./cmd/webhook

# What both images share: the base, the user, and the OCI labels of the
# release (make docker-build passes VERSION, REVISION and SOURCE).
FROM gcr.io/distroless/static:nonroot AS release
ARG VERSION
ARG REVISION
ARG SOURCE
LABEL org.opencontainers.image.source="${SOURCE}" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}"
USER 65532:65532

FROM release AS webhook
LABEL org.opencontainers.image.title="dependency-webhook" \
      org.opencontainers.image.description="Admission webhook of the kcp dependency-controller"
COPY --from=builder /out/webhook /webhook
ENTRYPOINT ["/webhook"]

FROM release AS controller
LABEL org.opencontainers.image.title="dependency-controller" \
      org.opencontainers.image.description="The kcp dependency-controller"
COPY --from=builder /out/controller /controller
ENTRYPOINT ["/controller"]
