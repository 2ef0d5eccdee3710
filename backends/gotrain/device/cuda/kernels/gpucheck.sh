#!/usr/bin/env bash
# gpucheck.sh build DIR: builds, here (toolkit and g++ installed), the kernel test
#   binary and a test driver linked against the system's libcuda.so.1 into DIR.
# gpucheck.sh run DIR: on a GPU machine, runs the kernel op tests with that driver:
#   every kernel on the real GPU against the cpu device, both "orders" (the order
#   only matters on the CPU runner), the tolerances of ops_test.go; with
#   SANITIZE=memcheck|racecheck|synccheck under compute-sanitizer when it exists.
set -euo pipefail
cd "$(dirname "$0")"
cmd="${1:?usage: gpucheck.sh build|run DIR}"
dir="${2:?usage: gpucheck.sh build|run DIR}"
case "$cmd" in
build)
	mkdir -p "$dir"
	go test -c -o "$dir/kernels.test" .
	g++ -std=c++17 -O2 -Wall -Werror -I "${CUDA_HOME:-/usr}/include" fakecuda/src/driver.cc \
		-o "$dir/driver" -l:libcuda.so.1 -ldl
	;;
run)
	dir="$(cd "$dir" && pwd)"
	export FSDPBENCH_KERNELS_DRIVER="$dir/driver"
	if [ -n "${SANITIZE:-}" ]; then
		san="$(command -v compute-sanitizer || true)"
		[ -n "$san" ] || { echo "gpucheck.sh: SANITIZE=$SANITIZE but no compute-sanitizer on PATH" >&2; exit 1; }
		printf '#!/bin/sh\nexec %s --tool %s --error-exitcode 9 %s "$@"\n' "$san" "$SANITIZE" "$dir/driver" >"$dir/driver-san"
		chmod +x "$dir/driver-san"
		export FSDPBENCH_KERNELS_DRIVER="$dir/driver-san"
	fi
	"$dir/kernels.test" -test.v -test.count=1 -test.run 'TestElementwise|TestCasts|TestSums|TestEmbedding|TestRMSNorm|TestRoPE|TestSwiGLU|TestCrossEntropy|TestAdamW|TestAttention'
	;;
*)
	echo "gpucheck.sh: unknown command $cmd (build or run)" >&2
	exit 2
	;;
esac
