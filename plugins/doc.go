// Package plugins will host external backends over hashicorp/go-plugin (protocol,
// discovery, lock file). Nothing is served yet: built-in backends run in-process
// through backends.Backend, and the plugin host arrives with its own issue.
package plugins
