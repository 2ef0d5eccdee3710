// runner.h: the CPU runner's interface to the fake libcuda (runner.cc).
#pragma once

#include <string>
#include <vector>

#include "cpu_runtime.h"

namespace fsdp_cpu {

// KernelEntry is a registered kernel: its name, signature (p pointer, i int32, l
// int64, f float32 per parameter), the block it was compiled for, and its caller.
struct KernelEntry {
  std::string name, sig;
  int block;
  void* fn;
  Invoke invoke;
};

// find_kernel returns the kernel registered under name, or null.
const KernelEntry* find_kernel(const char* name);
// all_kernels lists the registry in name order.
std::vector<const KernelEntry*> all_kernels();
// run executes the grid synchronously; params is cuLaunchKernel's kernelParams.
// Divergent barriers abort the process with a message naming kernel, block, thread.
int run(const KernelEntry* k, dim3 grid, dim3 block, size_t shared, void** params, bool reverse);

}  // namespace fsdp_cpu
