#!/usr/bin/env bash
# gen.sh [OUT]: compiles every .cu of this directory into one fatbin (sm_80 and sm_90
# cubins plus compute_80 PTX) with the strict flags: warnings are errors, and a
# spill, local memory or a double-precision instruction fails the build. Run by
# `go generate` (OUT = kernels.fatbin) and by the test that checks the committed
# fatbin is what the sources give (OUT in a temp dir). The .cu files are compiled as
# one translation unit, included in name order, so the output depends only on them.
set -euo pipefail
cd "$(dirname "$0")"
out="${1:-kernels.fatbin}"
nvcc="${NVCC:-nvcc}"
command -v "$nvcc" >/dev/null || { echo "gen.sh: $nvcc not found: install the CUDA toolkit (Debian non-free nvidia-cuda-toolkit, see .ci/deps)" >&2; exit 1; }
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
for f in $(LC_ALL=C ls *.cu); do echo "#include \"$PWD/$f\""; done > "$tmp/all.cu"
"$nvcc" -fatbin -o "$tmp/out.fatbin" \
	-gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 -gencode arch=compute_80,code=compute_80 \
	-Werror all-warnings -Xptxas -warn-spills,-warn-lmem-usage,--warn-on-double-precision-use \
	-I "$PWD" "$tmp/all.cu"
cp "$tmp/out.fatbin" "$out"
