# The README's test command is `make test`: it installs what the tests need on a
# fresh Debian machine (when run as root or with sudo), starts a one-node Slurm on
# localhost, and runs every test with -race.
GO ?= go

.PHONY: test deps build lint bench kernels-asan

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

# The CUDA kernels' CPU-runner tests once more, with the fake libcuda and its driver
# built with AddressSanitizer (an out-of-bounds access of a kernel aborts the test).
kernels-asan:
	FAKECUDA_TEST_ASAN=1 $(GO) test -count=1 -timeout 20m ./backends/gotrain/device/cuda/kernels/

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...
