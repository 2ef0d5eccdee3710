#!/bin/sh
# A stand-in for a training launcher, for the exec plugin's tests: it keeps the
# metrics contract (FSDPBENCH step lines on stdout, ranks/rank-<r>.json per rank in
# $FSDPBENCH_METRICS_DIR). Arguments: world size, measured steps.
ws=$1; steps=$2
s=1; stepsjson=""
while [ $s -le $steps ]; do
  echo "FSDPBENCH {\"step\": $s, \"loss\": 2.5, \"step_time_s\": 0.01, \"rank\": 0}"
  [ -n "$stepsjson" ] && stepsjson="$stepsjson,"
  stepsjson="$stepsjson{\"step\": $s, \"loss\": 2.5, \"step_time_s\": 0.01}"
  s=$((s+1))
done
r=0
while [ $r -lt $ws ]; do
  printf '{"rank": %d, "world_size": %d, "device": "cpu", "tokens": 1000, "measured_wall_s": 0.05, "steps": [%s], "peak_rss_bytes": 1000000}\n' $r $ws "$stepsjson" > "$FSDPBENCH_METRICS_DIR/rank-$r.json"
  r=$((r+1))
done
echo "fake: done" >&2
