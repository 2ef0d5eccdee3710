// Package plugins hosts external backends: binaries named fsdpbench-backend-<name>
// that serve backends.Backend over hashicorp/go-plugin (gRPC, protocol in
// plugins/proto, handshake in plugins/protocol). It finds them on the plugin path
// (Discover, SearchPath: $FSDPBENCH_PLUGIN_PATH, then ~/.fsdpbench/plugins), checks
// them against plugins.lock (LockPath, Pin, WriteLock: only pinned binaries with an
// unchanged SHA-256 run), and runs each call in a fresh process that is killed with
// everything it started when the call ends (Backend). Plugin authors use plugins/sdk
// and check their binary with plugins/sdk/plugintest; plugins/examples/exec is a
// complete plugin.
package plugins
