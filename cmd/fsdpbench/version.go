package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// buildVersion and buildCommit are set at link time: the Makefile's build and
// install set buildCommit (and buildVersion when VERSION is given), so the commit
// is known where Go records no VCS stamp (-buildvcs=false, a source tarball):
// go build -ldflags "-X main.buildVersion=v0.1.0 -X main.buildCommit=$(git rev-parse HEAD)".
var (
	buildVersion string
	buildCommit  string
)

// version is the release version, or the module version Go recorded ("(devel)").
func version() string {
	if buildVersion != "" {
		return buildVersion
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
}

// commit is the source revision, from the release build or Go's VCS stamp.
func commit() string {
	if buildCommit != "" {
		return buildCommit
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				return s.Value
			}
		}
	}
	return ""
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version, commit and Go version",
		Args:  cobra.NoArgs,
		Run: func(cmd *cobra.Command, _ []string) {
			c := commit()
			if c == "" {
				c = "unknown"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "fsdpbench %s (commit %s, %s %s/%s)\n", version(), c, runtime.Version(), runtime.GOOS, runtime.GOARCH)
		},
	}
}
