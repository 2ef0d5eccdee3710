// Package torchrun will be the backend that launches PyTorch training under
// torchrun (DDP and FSDP) and reads its metrics back into results; that backend
// comes next. For now it holds python/, the project's PyTorch script:
// python/fsdpbench_train.py is the reference model, initialization, synthetic data
// and AdamW step of the Go trainer (backends/gotrain) written in PyTorch, so that
// the two engines train the same model on the same data and their per-step losses
// can be compared (TestCrossEngineParity).
package torchrun
