# The README's test command is `make test`: it installs what the tests need on a
# fresh Debian machine (when run as root or with sudo), starts a one-node Slurm on
# localhost, and runs every test with -race.
GO ?= go

.PHONY: test deps build lint bench kernels-asan cuda-asan gpu-check

build:
	$(GO) build -o bin/fsdpbench ./cmd/fsdpbench

deps:
	./.ci/deps

lint:
	@unformatted="$$(gofmt -l $$(git ls-files '*.go'))"; \
	if [ -n "$$unformatted" ]; then echo "gofmt would change:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...

# The tests run while a one-node Slurm is up for the launcher's tests (.ci/with-slurm
# starts one, and stops it afterwards, when none answers); then every fuzz target
# runs for a bounded time (.ci/fuzz), and the CUDA kernels'
# CPU-runner tests once more under AddressSanitizer.
test: deps lint
	./.ci/with-slurm $(GO) test -race -timeout 20m ./...
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
# thread of its own (FAKECUDA_STREAMS=async), the code that event lifetimes live in.
cuda-asan:
	$(GO) test -c -o bin/cuda-asan.test ./backends/gotrain/device/cuda
	cd backends/gotrain/device/cuda && FSDPBENCH_FAKE_ASAN=1 ASAN_OPTIONS=detect_leaks=0 \
		LD_PRELOAD="$$(g++ -print-file-name=libasan.so)" ../../../../bin/cuda-asan.test -test.count=1 -test.timeout 20m
	cd backends/gotrain/device/cuda && FSDPBENCH_FAKE_ASAN=1 ASAN_OPTIONS=detect_leaks=0 FAKECUDA_STREAMS=async FAKECUDA_STREAM_DELAY_US=1:200 \
		LD_PRELOAD="$$(g++ -print-file-name=libasan.so)" ../../../../bin/cuda-asan.test -test.count=1 -test.timeout 20m \
		-test.run 'TestConformance/forward|TestFreeAfter|TestCollectiveStream|TestUseAfterClose|TestExtras'

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

# gpu-check builds the cuda device's test binaries here and runs them on a GPU
# (the op suite against the cpu device, compute-sanitizer, training runs against
# the cpu losses, benchmarks); see .ci/gpu-check for running the two halves on
# different machines.
gpu-check:
	bash .ci/gpu-check
