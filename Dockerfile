# Builds the controller and the webhook. Select the image with --target:
#   docker build --target controller -t dependency-controller .
#   docker build --target webhook -t dependency-webhook .
# (make docker-build builds both.)

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

FROM gcr.io/distroless/static:nonroot AS webhook
COPY --from=builder /out/webhook /webhook
USER 65532:65532
ENTRYPOINT ["/webhook"]

FROM gcr.io/distroless/static:nonroot AS controller
COPY --from=builder /out/controller /controller
USER 65532:65532
ENTRYPOINT ["/controller"]
