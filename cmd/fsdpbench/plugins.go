package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/fsdpbench/fsdpbench/plugins"
)

func newPluginsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "plugins",
		Short: "Manage external backends (plugin binaries named fsdpbench-backend-<name>)",
		Long: `Plugins are binaries named fsdpbench-backend-<name> in the directories of
$FSDPBENCH_PLUGIN_PATH and in ~/.fsdpbench/plugins. Only the plugins pinned in the lock
file (path and sha256) run; the lock file is ` + "`$FSDPBENCH_PLUGIN_LOCK`" + `, else
~/.fsdpbench/plugins.lock. ` + "`fsdpbench backends`" + ` lists them with their availability.`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "lock",
		Short: "Pin the plugins found now (path and sha256) in the lock file; only pinned plugins run",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			dirs := plugins.SearchPath()
			found := plugins.Discover(dirs)
			lock, err := plugins.Pin(found)
			if err != nil {
				return failure(fmt.Errorf("pinning plugins: %w", err))
			}
			path := plugins.LockPath()
			if err := plugins.WriteLock(path, lock); err != nil {
				return failure(err)
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "%s: pinned %d plugin(s)\n", path, len(lock.Plugins))
			var rows [][]string
			for _, e := range lock.Plugins {
				rows = append(rows, []string{e.Name, e.SHA256[:16], e.Path})
			}
			if len(rows) > 0 {
				if err := writeTable(out, []string{"name", "sha256", "path"}, rows); err != nil {
					return failure(err)
				}
			}
			for _, f := range found {
				if f.Problem != "" {
					fmt.Fprintf(cmd.ErrOrStderr(), "not pinned: %s: %s\n", f.Name, f.Problem)
				}
			}
			if len(found) == 0 {
				fmt.Fprintf(cmd.ErrOrStderr(), "no plugins (%s*) in %s\n", plugins.Prefix, strings.Join(dirs, ", "))
			}
			return nil
		},
	})
	return cmd
}
