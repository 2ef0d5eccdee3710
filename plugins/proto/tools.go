//go:build tools

// This file pins the protoc generators in go.mod, so `go generate ./plugins/proto`
// builds the same versions everywhere; the tools tag keeps them out of builds.
package proto

import (
	_ "google.golang.org/grpc/cmd/protoc-gen-go-grpc"
	_ "google.golang.org/protobuf/cmd/protoc-gen-go"
)
