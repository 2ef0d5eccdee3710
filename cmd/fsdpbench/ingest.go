package main

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/fsdpbench/fsdpbench/harness/dirlock"
	"github.com/fsdpbench/fsdpbench/ingest"
)

func newIngestCmd() *cobra.Command {
	var (
		o       ingest.Options
		out     string
		mapKeys []string
	)
	cmd := &cobra.Command{
		Use:   "ingest DIR...",
		Short: "Read folders of past runs (run_args.json + metrics.json) into a results tree",
		Long: `ingest reads run folders as existing training scripts leave them
(<run>/run_args.json and <run>/metrics.json with wall_time_s, approx_tokens_per_rank,
approx_tokens_per_s_per_rank, world_size, gpu0, torch, model, dataset, fsdp, bf16) and
writes <results>/<name>/, which report, export, compare and gate read like a sweep's.

Settings are mapped onto the canonical axes (batch_size_per_device and
per_device_train_batch_size -> batch_per_device, gradient_checkpointing ->
activation_checkpointing, bf16: true -> mixed_precision=bf16, ...); fsdp: true needs
--fsdp-sharding. Axes a folder does not give come from --spec (use the spec of the
sweep you will compare with, so the run IDs match), --set, or the defaults; each is
listed. Keys that are no axis are listed and kept in the metrics' extra.run_args.

Ingesting into an existing <results>/<name>/ rewrites it only when every run it
holds came from a folder read again (the same ingest, repeated or given more
folders); a sweep's tree or an ingest of other folders is refused (exit 2), as is
a tree another process is writing (--wait waits for it).`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Map = map[string]string{}
			for _, m := range mapKeys {
				k, axis, ok := strings.Cut(m, "=")
				if !ok || k == "" || axis == "" {
					return usageError(fmt.Errorf("--map %q: expected key=axis, e.g. --map train_micro_bs=batch_per_device", m))
				}
				o.Map[k] = axis
			}
			o.OnWait = func(he *dirlock.HeldError) {
				fmt.Fprintf(cmd.ErrOrStderr(), "waiting for %s: in use by %s\n", he.Dir, he.Holder)
			}
			reports, err := ingest.Ingest(cmd.Context(), args, out, o)
			if err != nil {
				if cmd.Context().Err() != nil {
					return &exitError{code: ExitInterrupted, err: errors.New("interrupted; nothing was written")}
				}
				return usageError(err)
			}
			w := cmd.OutOrStdout()
			for _, r := range reports {
				fmt.Fprintf(w, "%s -> %s\n", r.Dir, r.ID)
				if len(r.Mapped) > 0 {
					fmt.Fprintf(w, "  mapped:    %s\n", strings.Join(r.Mapped, ", "))
				}
				if len(r.Defaulted) > 0 {
					fmt.Fprintf(w, "  not given (spec, --set or default): %s\n", strings.Join(r.Defaulted, ", "))
				}
				if len(r.Unmapped) > 0 {
					fmt.Fprintf(w, "  not mapped (kept in extra.run_args): %s\n", strings.Join(r.Unmapped, ", "))
				}
				for _, warn := range r.Warnings {
					fmt.Fprintf(w, "  warning: %s\n", warn)
				}
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "%d folders ingested into %s\n", len(reports), filepath.Join(out, o.Name))
			return nil
		},
	}
	cmd.Flags().StringVar(&o.Name, "name", "ingested", "sweep name of the tree written")
	cmd.Flags().StringVar(&out, "results", "fsdpbench-results", "results directory to write into")
	cmd.Flags().StringVar(&o.Spec, "spec", "", "sweep spec whose settings fill what the folders do not say")
	cmd.Flags().StringArrayVar(&o.Set, "set", nil, "key=value for every folder (repeatable), as sweep's --set")
	cmd.Flags().StringVar(&o.FSDPSharding, "fsdp-sharding", "", "the sharding strategy of folders that say fsdp: true")
	cmd.Flags().StringArrayVar(&mapKeys, "map", nil, "key=axis: map a folder key onto an axis (repeatable)")
	cmd.Flags().BoolVar(&o.Wait, "wait", false, "when another process is writing the tree, wait for it instead of exiting 2")
	cmd.Flags().BoolVar(&o.TrainsModelAxis, "trains-model-axis", false, "the model axis names the model the runs trained (MFU is computed from its shape)")
	return cmd
}
