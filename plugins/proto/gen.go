// Package proto is the generated gRPC code of the fsdpbench plugin protocol
// (backend.proto). Edit backend.proto, then regenerate with
//
//	go generate ./plugins/proto
//
// which needs protoc (Debian: apt install protobuf-compiler) and builds the Go
// generators at the versions go.mod pins (see tools.go).
package proto

//go:generate sh gen.sh
