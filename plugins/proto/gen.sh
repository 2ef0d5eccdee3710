#!/bin/sh
# Regenerates backend.pb.go and backend_grpc.pb.go from backend.proto with protoc and
# the generators at the versions go.mod pins (tools.go keeps them there). Run it
# through `go generate ./plugins/proto`.
set -eu
cd "$(dirname "$0")"
if ! command -v protoc >/dev/null 2>&1; then
	echo "gen.sh: protoc not found; install it (Debian: apt install protobuf-compiler)" >&2
	exit 1
fi
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
GOBIN="$bin" go install google.golang.org/protobuf/cmd/protoc-gen-go google.golang.org/grpc/cmd/protoc-gen-go-grpc
PATH="$bin:$PATH" protoc --go_out=. --go_opt=paths=source_relative \
	--go-grpc_out=. --go-grpc_opt=paths=source_relative backend.proto
