# The README's test command is `make test`: it installs what the tests need on a
# fresh Debian machine (when run as root or with sudo), starts the Slurm cluster of
# .ci/cluster on this machine, and runs every test with -race.
GO ?= go

.PHONY: test deps build install lint bench bench-cpu-engines kernels-asan cuda-asan gpu-check gpu-check-quick

# go-nvml's cgo wrappers call the NVML functions that NVML 13 marks deprecated, and
# gcc warns about each (~150 lines) the first time the package compiles: a
# newcomer's first build would print them before any result. Whatever CGO_CFLAGS
# the environment or the command line gives (Go's default: -O2 -g) is kept.
CGO_CFLAGS ?= -O2 -g
override CGO_CFLAGS += -Wno-deprecated-declarations
export CGO_CFLAGS

# `fsdpbench version` names the commit it was built from even where Go records no
# VCS stamp (-buildvcs=false, a worktree Go cannot read, a source tarball with
# COMMIT=... given). VERSION, when given, replaces the module's version.
COMMIT ?= $(shell git rev-parse HEAD 2>/dev/null)
VERSION ?=
LDFLAGS := -X main.buildCommit=$(COMMIT) $(if $(VERSION),-X main.buildVersion=$(VERSION))

# bin/fsdpbench, for the targets below that run it from this checkout.
build:
	$(GO) build -ldflags '$(LDFLAGS)' -o bin/fsdpbench ./cmd/fsdpbench

# The README's install line: fsdpbench into $(go env GOBIN), else $(go env GOPATH)/bin,
# as `go install` does; says so, and how to put that directory on PATH when it is not.
install:
	@$(GO) install -ldflags '$(LDFLAGS)' ./cmd/fsdpbench
	@dir="$$($(GO) env GOBIN)"; [ -n "$$dir" ] || dir="$$($(GO) env GOPATH)/bin"; \
	echo "installed $$dir/fsdpbench"; \
	case ":$$PATH:" in *":$$dir:"*) ;; *) echo "$$dir is not on your PATH: export PATH=\"\$$PATH:$$dir\"" ;; esac

deps:
	./.ci/deps

lint:
	@unformatted="$$(gofmt -l $$(git ls-files '*.go'))"; \
	if [ -n "$$unformatted" ]; then echo "gofmt would change:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...
	CGO_ENABLED=0 $(GO) build ./... && CGO_ENABLED=0 $(GO) vet ./...

# .ci/test-cluster first checks the cluster script itself: a failed or interrupted
# start cleans up, and a munged that already runs is used. The tests run while a
# Slurm is up for the launcher's tests (.ci/with-slurm starts one, and stops it
# afterwards, when none answers); then every fuzz target runs for a bounded time
# (.ci/fuzz), and the CUDA kernels' CPU-runner tests once more under AddressSanitizer.
test: deps lint
	./.ci/test-cluster
	./.ci/with-slurm $(GO) test -race -timeout 30m ./...
	GO=$(GO) ./.ci/fuzz
	$(MAKE) kernels-asan
	$(MAKE) cuda-asan

# The CUDA kernels' CPU-runner tests once more, with the fake libcuda and its driver
# built with AddressSanitizer (an out-of-bounds access of a kernel aborts the test).
kernels-asan:
	FAKECUDA_TEST_ASAN=1 $(GO) test -count=1 -timeout 20m ./backends/gotrain/device/cuda/kernels/

# The cuda device's tests over fakes built with AddressSanitizer: the test binary is
# built first, so that only it, not the go tool, runs with the sanitizer preloaded.
# A second pass runs the ops and the stream tests with every stream of the fake on a
# thread of its own (FAKECUDA_STREAMS=async), the code that event lifetimes live in
# (the op profiler's timing events included).
cuda-asan:
	$(GO) test -c -o bin/cuda-asan.test ./backends/gotrain/device/cuda
	cd backends/gotrain/device/cuda && FSDPBENCH_FAKE_ASAN=1 ASAN_OPTIONS=detect_leaks=0 \
		LD_PRELOAD="$$(g++ -print-file-name=libasan.so)" ../../../../bin/cuda-asan.test -test.count=1 -test.timeout 20m
	cd backends/gotrain/device/cuda && FSDPBENCH_FAKE_ASAN=1 ASAN_OPTIONS=detect_leaks=0 FAKECUDA_STREAMS=async FAKECUDA_STREAM_DELAY_US=1:200 \
		LD_PRELOAD="$$(g++ -print-file-name=libasan.so)" ../../../../bin/cuda-asan.test -test.count=1 -test.timeout 20m \
		-test.run 'TestConformance/forward|TestFreeAfter|TestCollectiveStream|TestUseAfterClose|TestExtras|TestRooflineTableOnTheRunner'

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

# bench-cpu-engines trains the cpu-engines-* example specs on torchrun (Debian's torch)
# and on gotrain, each run on one engine right after the other, and prints
# gotrain's tokens/s/rank against torch's per run (`fsdpbench compare`: the
# change column is the ratio − 1), after the GEMM GFLOP/s of both on this
# machine. CPU_ENGINES=h256 runs only the small model.
CPU_ENGINES ?= h256 h512
CPU_ENGINES_RESULTS ?= fsdpbench-results/cpu-engines
bench-cpu-engines: build
	$(GO) test -run '^$$' -bench 'GEMM' ./backends/gotrain/device/cpu/
	set -e; for s in $(CPU_ENGINES); do \
		for ws in 1 2; do for e in torchrun gotrain; do \
			bin/fsdpbench sweep sweeps/examples/cpu-engines-$$s.yaml --set backend=$$e --set world_size=$$ws \
				--results $(CPU_ENGINES_RESULTS)/$$e --rerun >/dev/null; \
		done; done; \
		bin/fsdpbench compare $(CPU_ENGINES_RESULTS)/torchrun/cpu-engines-$$s $(CPU_ENGINES_RESULTS)/gotrain/cpu-engines-$$s \
			--metric tokens_per_s_per_rank --metric step_time_s.median; \
		for e in torchrun gotrain; do \
			bin/fsdpbench export $(CPU_ENGINES_RESULTS)/$$e/cpu-engines-$$s --format csv -o $(CPU_ENGINES_RESULTS)/$$e-$$s.csv; \
		done; \
		awk -F, -v spec=$$s 'FNR == 1 { for (i = 1; i <= NF; i++) if ($$i == "tokens_per_s_per_rank") c = i; next } \
			NR == FNR { t[$$1] = $$c; next } \
			t[$$1] > 0 && $$c > 0 { printf "%s %s: gotrain/torch tokens/s/rank = %.2fx\n", spec, $$1, $$c / t[$$1] }' \
			$(CPU_ENGINES_RESULTS)/torchrun-$$s.csv $(CPU_ENGINES_RESULTS)/gotrain-$$s.csv; \
	done

# gpu-check builds the cuda device's test binaries here and runs them on a GPU
# (the op suite against the cpu device, compute-sanitizer, training runs against
# the cpu losses, benchmarks); see .ci/gpu-check for running the two halves on
# different machines.
gpu-check:
	bash .ci/gpu-check

# gpu-check-quick: issue 24's table within a few GPU minutes (bf16 tensor-core
# attention against the cpu device, attention TFLOP/s, the per-op roofline with the
# fused ops and the step's launch count and launch budget, 20 bf16 steps tracking
# the cpu losses, llama-1b at batch 1/2/4 on both engines, each engine's step
# breakdown and timeline, two gotrain ranks over NCCL); build here, carry
# bin/gpu-check-quick, `bash .ci/gpu-check-quick run` there. See the script.
gpu-check-quick:
	bash .ci/gpu-check-quick
