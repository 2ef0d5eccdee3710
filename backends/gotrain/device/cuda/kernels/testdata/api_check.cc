// api_check.cc: exercises the fake libcuda's driver calls one by one (built and run
// by TestFakeDriverAPI against the fake); prints "ok" or the first failed check.
#include <cuda.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

extern "C" size_t fakecuda_mem_used();

#define EXPECT(call, want)                                                                  \
  do {                                                                                      \
    CUresult r_ = (call);                                                                   \
    if (r_ != (want)) {                                                                     \
      std::printf("FAIL line %d: %s returned %d, want %d\n", __LINE__, #call, int(r_), int(want)); \
      std::exit(1);                                                                         \
    }                                                                                       \
  } while (0)
#define OK(call) EXPECT(call, CUDA_SUCCESS)
#define TRUE(cond)                                             \
  do {                                                         \
    if (!(cond)) {                                             \
      std::printf("FAIL line %d: %s\n", __LINE__, #cond);      \
      std::exit(1);                                            \
    }                                                          \
  } while (0)

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  FILE* f = std::fopen(argv[1], "rb");
  // The whole fatbin: cuModuleLoadData reads as many bytes as its header says
  // (a fixed 1 MiB buffer truncated the 1.5 MB fatbin, an overflow ASan caught).
  if (!f || std::fseek(f, 0, SEEK_END) != 0) return 2;
  std::vector<char> image(std::ftell(f));
  std::rewind(f);
  image.resize(std::fread(image.data(), 1, image.size(), f));
  std::fclose(f);

  int n = -1;
  EXPECT(cuDeviceGetCount(&n), CUDA_ERROR_NOT_INITIALIZED);
  EXPECT(cuInit(1), CUDA_ERROR_INVALID_VALUE);
  OK(cuInit(0));
  int v;
  OK(cuDriverGetVersion(&v));
  TRUE(v == CUDA_VERSION);
  OK(cuDeviceGetCount(&n));
  TRUE(n == 1);
  CUdevice dev;
  EXPECT(cuDeviceGet(&dev, 1), CUDA_ERROR_INVALID_DEVICE);
  OK(cuDeviceGet(&dev, 0));
  char name[64];
  OK(cuDeviceGetName(name, sizeof name, dev));
  TRUE(std::strstr(name, "fakecuda") != nullptr);
  int major, sms;
  OK(cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev));
  OK(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
  TRUE(major == 8 && sms > 0);
  size_t total, freeB;
  OK(cuDeviceTotalMem(&total, dev));
  TRUE(total == (1u << 20));  // FAKECUDA_MEM_LIMIT from the test
  CUcontext ctx;
  OK(cuDevicePrimaryCtxRetain(&ctx, dev));
  OK(cuCtxSetCurrent(ctx));

  // Memory: round trip, bounds, memset, accounting, out of memory.
  CUdeviceptr a, b;
  OK(cuMemAlloc(&a, 1000));
  OK(cuMemAlloc(&b, 1000));
  OK(cuMemGetInfo(&freeB, &total));
  TRUE(total - freeB == 2000 && fakecuda_mem_used() == 2000);
  float src[250], dst[250];
  for (int i = 0; i < 250; i++) src[i] = float(i);
  OK(cuMemcpyHtoD(a, src, 1000));
  OK(cuMemcpyDtoD(b, a, 1000));
  OK(cuMemcpyDtoH(dst, b, 1000));
  TRUE(std::memcmp(src, dst, 1000) == 0);
  EXPECT(cuMemcpyHtoD(a + 4, src, 1000), CUDA_ERROR_INVALID_VALUE);  // one float past the end
  OK(cuMemsetD32(b, 0x3f800000u, 250));
  OK(cuMemcpyDtoH(dst, b, 1000));
  TRUE(dst[0] == 1.0f && dst[249] == 1.0f);
  EXPECT(cuMemFree(a + 4), CUDA_ERROR_INVALID_VALUE);
  CUdeviceptr big;
  EXPECT(cuMemAlloc(&big, 1 << 20), CUDA_ERROR_OUT_OF_MEMORY);

  // Modules: a fatbin only; a kernel must be registered and in the image.
  CUmodule mod;
  int junk[8] = {0};
  EXPECT(cuModuleLoadData(&mod, junk), CUDA_ERROR_INVALID_IMAGE);
  OK(cuModuleLoadData(&mod, image.data()));
  CUfunction fn;
  EXPECT(cuModuleGetFunction(&fn, mod, "fsdp_nope"), CUDA_ERROR_NOT_FOUND);
  EXPECT(cuModuleGetFunction(&fn, mod, "check_shuffles"), CUDA_ERROR_NOT_FOUND);  // registered, not in this image
  OK(cuModuleGetFunction(&fn, mod, "fsdp_scale"));
  int maxThreads;
  OK(cuFuncGetAttribute(&maxThreads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, fn));
  TRUE(maxThreads == 256);

  // A launch on a stream between two events.
  CUstream s;
  CUevent e0, e1;
  OK(cuStreamCreate(&s, 0));
  OK(cuEventCreate(&e0, 0));
  OK(cuEventCreate(&e1, 0));
  float ms;
  EXPECT(cuEventElapsedTime(&ms, e0, e1), CUDA_ERROR_INVALID_HANDLE);  // not recorded yet
  OK(cuEventRecord(e0, s));
  float alpha = 2.0f;
  long long count = 250;
  void* params[] = {&b, &alpha, &count};
  EXPECT(cuLaunchKernel(fn, 1, 1, 1, 256, 1, 1, 64 * 1024, s, params, nullptr), CUDA_ERROR_INVALID_VALUE);
  OK(cuLaunchKernel(fn, 1, 1, 1, 256, 1, 1, 0, s, params, nullptr));
  OK(cuEventRecord(e1, s));
  OK(cuStreamWaitEvent(nullptr, e1, 0));
  OK(cuEventSynchronize(e1));
  OK(cuEventElapsedTime(&ms, e0, e1));
  TRUE(ms >= 0);
  OK(cuMemcpyDtoHAsync(dst, b, 1000, s));
  OK(cuStreamSynchronize(s));
  TRUE(dst[0] == 2.0f && dst[249] == 2.0f);
  OK(cuEventDestroy(e0));
  OK(cuEventDestroy(e1));
  OK(cuStreamDestroy(s));
  EXPECT(cuStreamDestroy(s), CUDA_ERROR_INVALID_HANDLE);

  const char* str;
  OK(cuGetErrorName(CUDA_ERROR_LAUNCH_FAILED, &str));
  TRUE(std::strcmp(str, "CUDA_ERROR_LAUNCH_FAILED") == 0);
  OK(cuGetErrorString(CUDA_ERROR_OUT_OF_MEMORY, &str));

  OK(cuMemFree(a));
  OK(cuMemFree(b));
  TRUE(fakecuda_mem_used() == 0);

  // A second module, unloaded: its functions go with it (LeakSanitizer checks).
  CUmodule mod2;
  CUfunction fn2;
  OK(cuModuleLoadData(&mod2, image.data()));
  OK(cuModuleGetFunction(&fn2, mod2, "fsdp_zero"));
  OK(cuModuleUnload(mod2));
  EXPECT(cuModuleUnload(mod2), CUDA_ERROR_INVALID_HANDLE);

  // A host address passed as a pointer argument: the context fails, sticky.
  CUdeviceptr host = reinterpret_cast<CUdeviceptr>(src);
  void* bad[] = {&host, &alpha, &count};
  OK(cuLaunchKernel(fn, 1, 1, 1, 256, 1, 1, 0, nullptr, bad, nullptr));
  EXPECT(cuCtxSynchronize(), CUDA_ERROR_ILLEGAL_ADDRESS);
  EXPECT(cuMemAlloc(&a, 4), CUDA_ERROR_ILLEGAL_ADDRESS);
  EXPECT(cuModuleUnload(mod), CUDA_ERROR_ILLEGAL_ADDRESS);
  // Releasing the last reference frees the context's resources and its error.
  OK(cuDevicePrimaryCtxRelease(dev));
  EXPECT(cuDevicePrimaryCtxRelease(dev), CUDA_ERROR_INVALID_CONTEXT);
  OK(cuDevicePrimaryCtxRetain(&ctx, dev));
  OK(cuMemAlloc(&a, 4));
  OK(cuMemFree(a));
  OK(cuDevicePrimaryCtxRelease(dev));
  std::printf("ok\n");
  return 0;
}
