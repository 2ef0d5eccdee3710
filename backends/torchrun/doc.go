// Package torchrun is the backend that launches PyTorch training under torchrun
// (DDP everywhere; FSDP on CUDA) and reads its metrics back into results.
//
// python/fsdpbench_train.py, embedded in the binary and written to each run's
// directory, is the reference model, initialization, synthetic data and AdamW step
// of the Go trainer (backends/gotrain) written in PyTorch, so that the two engines
// train the same model on the same data and their per-step losses can be compared
// (TestCrossEngineParity, TestRunMatchesGoTrainer). Under torchrun each rank writes
// ranks/rank-<r>.json (tokens, measured wall time, per-step losses and times, peak
// memory, torch version) and rank 0 prints "FSDPBENCH {json}" step lines.
//
// Beside torchrun and accelerate launch, backend_options.launcher python runs a
// script as one plain process (a script's single-process mode, nanoGPT's
// "python train.py --device=cpu"), and launcher command runs any argv template
// that starts the ranks itself (deepspeed, composer, tune run, srun). All four
// share the argument templates, the metrics contract, the log extractors and
// the process hygiene (contract.RunGroup: a process group and a reaper per run).
//
// Where a step's time goes (profile.go): the ranks write torch.profiler Chrome
// traces into $FSDPBENCH_PROFILE_DIR (the project's script records up to 3
// steps after the measured ones); the harness reads each rank's recorded steps
// into compute, collective (by kind), exposed communication and other, per
// rank the median step's, and merges the steps into the run's timeline.json.
package torchrun
