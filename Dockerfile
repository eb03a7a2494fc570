# a2farm: one image for every role (coordinator, worker, learner, nats).
# Build: docker build -t a2farm .   Run: docker run a2farm worker --help
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# cgo is needed: the Python parser is tree-sitter's C runtime.
RUN CGO_ENABLED=1 go build -trimpath -ldflags="-s -w" -o /out/a2farm ./cmd/a2farm

FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/* && useradd --system --uid 10001 --home /data a2farm
COPY --from=build /out/a2farm /usr/local/bin/a2farm
USER a2farm
WORKDIR /data
ENTRYPOINT ["/usr/local/bin/a2farm"]
CMD ["--help"]
