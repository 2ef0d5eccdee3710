package main

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/fsdpbench/fsdpbench/harness/dirlock"
	"github.com/fsdpbench/fsdpbench/ingest"
	"github.com/fsdpbench/fsdpbench/termsafe"
)

func newIngestCmd() *cobra.Command {
	var (
		o       ingest.Options
		out     string
		mapKeys []string
	)
	cmd := &cobra.Command{
		Use:   "ingest DIR...",
		Short: "Read folders of past runs (metrics.json + run_args.json, Trainer output_dirs) into a results tree",
		Long: `ingest reads run folders as existing training scripts leave them and writes
<results>/<name>/, which report, export, compare and gate read like a sweep's:
  - <run>/metrics.json with the seeds' keys (wall_time_s, approx_tokens_per_rank,
    approx_tokens_per_s_per_rank, world_size, gpu0, torch, model, dataset, fsdp, bf16),
    beside an optional run_args.json;
  - a Hugging Face Trainer output_dir as it is: trainer_state.json (log_history: loss,
    learning_rate), all_results.json / train_results.json (train_runtime,
    train_samples_per_second, train_tokens_per_second) and the model's config.json;
    world_size x grad_accum comes from the Trainer's own figures;
  - beside either: a torchtitan job TOML and an accelerate config YAML (fsdp_config).

Throughput from a whole run's wall time (wall_time_s, train_runtime: start-up and
warm-up included) is stored as such (whole_run_wall_time) and marked † in report and
compare: it is below a steady-state figure, and a gap is no regression.

Settings map onto the canonical axes through the table below (--map key=axis adds
yours). The Trainer's fsdp option string ("full_shard auto_wrap", "shard_grad_op
offload") gives sharding, cpu_offload and wrap_policy; a bare fsdp: true needs
--fsdp-sharding, while accelerate's distributed_type FSDP and Lightning's strategy
fsdp without a sharding_strategy are those tools' default, full_shard. Hugging Face model ids become presets (listed below);
other models are read from a config.json in the folder, in a checkout the value names,
or in the Hugging Face cache ($HF_HUB_CACHE, $HF_HOME/hub, ~/.cache/huggingface/hub).
An explicit --set wins over a folder's value, and the output lists what it overrode.
Axes a folder does not give come from --spec (use the spec of the sweep you will
compare with, so the run IDs match), --set, or the defaults; each is listed. Keys that
are no axis are listed and kept in the metrics' extra.run_args.

Ingesting into an existing <results>/<name>/ rewrites it only when every run it
holds came from a folder read again (the same ingest, repeated or given more
folders); a sweep's tree or an ingest of other folders is refused (exit 2), as is
a tree another process is writing (--wait waits for it).

Axis spellings read (key [scripts that use it]):
` + ingest.AliasHelp(),
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
			// The spec's file and program paths resolve as `sweep` resolves them
			// (the models' and hardware's checks stay off: a past run's model may
			// be a label no preset has).
			o.Parse.PathOptions, o.Parse.ProgramOptions = specPathOptions, specProgramOptions
			reports, err := ingest.Ingest(cmd.Context(), args, out, o)
			if err != nil {
				if cmd.Context().Err() != nil {
					return &exitError{code: ExitInterrupted, err: errors.New("interrupted; nothing was written")}
				}
				return usageError(err)
			}
			// Folder and file names and the warnings quote what is on disk:
			// escaped as one text, so that no control sequence (an escape, an RTL
			// override in a folder name) reaches the terminal.
			var w strings.Builder
			for _, r := range reports {
				fmt.Fprintf(&w, "%s -> %s\n", r.Dir, r.ID)
				if len(r.Files) > 0 {
					fmt.Fprintf(&w, "  read:      %s\n", strings.Join(r.Files, ", "))
				}
				if len(r.Mapped) > 0 {
					fmt.Fprintf(&w, "  mapped:    %s\n", strings.Join(r.Mapped, ", "))
				}
				if len(r.Overridden) > 0 {
					fmt.Fprintf(&w, "  overridden by --set: %s\n", strings.Join(r.Overridden, ", "))
				}
				if len(r.Defaulted) > 0 {
					fmt.Fprintf(&w, "  not given (spec, --set or default): %s\n", strings.Join(r.Defaulted, ", "))
				}
				if len(r.Unmapped) > 0 {
					fmt.Fprintf(&w, "  not mapped (kept in extra.run_args): %s\n", strings.Join(r.Unmapped, ", "))
				}
				for _, warn := range r.Warnings {
					fmt.Fprintf(&w, "  warning: %s\n", warn)
				}
			}
			fmt.Fprint(cmd.OutOrStdout(), termsafe.Text(w.String()))
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
