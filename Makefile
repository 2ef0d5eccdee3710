# The README's test command is `make test`: it installs what the tests need on a
# fresh Debian machine (when run as root or with sudo), starts a one-node Slurm on
# localhost, and runs every test with -race.
GO ?= go

.PHONY: test deps build lint bench

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
# runs for a bounded time (.ci/fuzz).
test: deps lint
	./.ci/with-slurm $(GO) test -race -timeout 20m ./...
	GO=$(GO) ./.ci/fuzz

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...
