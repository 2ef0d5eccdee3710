// driver.cc: the kernel tests' launcher. It loads the fatbin (argv[1]) through the
// driver API of whatever libcuda.so.1 it is linked against (the fake, or on a GPU
// machine the real one) and serves launch requests from stdin, little-endian:
//
//	'L'                          -> u32 status, u32 len, the fake's registry text
//	'K' name(u32 len, bytes) grid(3×u32) block(3×u32) shared(u32)
//	    nbuf(u32) { bytes(u64) data }  nargs(u32) { kind(u8) value }
//	                             -> u32 status, then every buffer's bytes
//	'Q'                          -> exit
//
// An argument of kind 'p' is a buffer index (u32) and a byte offset (u64), so two
// arguments may alias one buffer; 'i' is an int32, 'l' an int64, 'f' a float32.
#include <cuda.h>
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

void read_exact(void* p, size_t n) {
  if (n && std::fread(p, 1, n, stdin) != n) std::exit(0);
}
template <class T>
T rd() {
  T v;
  read_exact(&v, sizeof v);
  return v;
}
void write_exact(const void* p, size_t n) {
  if (n && std::fwrite(p, 1, n, stdout) != n) std::exit(1);
}
template <class T>
void wr(T v) {
  write_exact(&v, sizeof v);
}

#define CHECK(x)                                                                 \
  do {                                                                           \
    CUresult r_ = (x);                                                           \
    if (r_ != CUDA_SUCCESS) {                                                    \
      std::fprintf(stderr, "driver: %s: error %d\n", #x, int(r_));               \
      std::exit(2);                                                              \
    }                                                                            \
  } while (0)

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: driver FATBIN < requests\n");
    return 2;
  }
  FILE* f = std::fopen(argv[1], "rb");
  if (!f) {
    std::perror(argv[1]);
    return 2;
  }
  std::vector<char> image;
  char chunk[65536];
  for (size_t n; (n = std::fread(chunk, 1, sizeof chunk, f)) > 0;) image.insert(image.end(), chunk, chunk + n);
  std::fclose(f);

  CUdevice dev;
  CUcontext ctx;
  CUmodule mod;
  CHECK(cuInit(0));
  CHECK(cuDeviceGet(&dev, 0));
  CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CHECK(cuCtxSetCurrent(ctx));
  CHECK(cuModuleLoadData(&mod, image.data()));

  for (;;) {
    int c = std::fgetc(stdin);
    if (c == EOF || c == 'Q') break;
    if (c == 'L') {
      using listFn = size_t (*)(char*, size_t);
      auto list = reinterpret_cast<listFn>(dlsym(RTLD_DEFAULT, "fakecuda_kernels"));
      std::string s;
      if (list) {
        s.resize(list(nullptr, 0));
        list(&s[0], s.size());
        s.resize(std::strlen(s.c_str()));
      }
      wr<unsigned>(list ? 0 : 1);
      wr<unsigned>(unsigned(s.size()));
      write_exact(s.data(), s.size());
      std::fflush(stdout);
      continue;
    }
    if (c != 'K') {
      std::fprintf(stderr, "driver: unknown request %d\n", c);
      return 2;
    }
    std::string name(rd<unsigned>(), '\0');
    read_exact(&name[0], name.size());
    unsigned g[3], b[3];
    for (auto& x : g) x = rd<unsigned>();
    for (auto& x : b) x = rd<unsigned>();
    unsigned shared = rd<unsigned>();
    unsigned nbuf = rd<unsigned>();
    std::vector<std::vector<char>> host(nbuf);
    std::vector<CUdeviceptr> dptr(nbuf);
    for (unsigned i = 0; i < nbuf; i++) {
      host[i].resize(rd<unsigned long long>());
      read_exact(host[i].data(), host[i].size());
      CHECK(cuMemAlloc(&dptr[i], host[i].size() ? host[i].size() : 4));
      CHECK(cuMemcpyHtoD(dptr[i], host[i].data(), host[i].size()));
    }
    unsigned nargs = rd<unsigned>();
    std::vector<unsigned long long> store(nargs);  // 8 bytes a slot, each argument at its start
    std::vector<void*> params(nargs);
    for (unsigned i = 0; i < nargs; i++) {
      char kind = rd<char>();
      void* slot = &store[i];
      switch (kind) {
        case 'p': {
          unsigned idx = rd<unsigned>();
          unsigned long long off = rd<unsigned long long>();
          if (idx >= nbuf) {
            std::fprintf(stderr, "driver: buffer %u of %u\n", idx, nbuf);
            return 2;
          }
          CUdeviceptr p = dptr[idx] + off;
          std::memcpy(slot, &p, sizeof p);
          break;
        }
        case 'i': {
          int v = rd<int>();
          std::memcpy(slot, &v, 4);
          break;
        }
        case 'l': {
          long long v = rd<long long>();
          std::memcpy(slot, &v, 8);
          break;
        }
        case 'f': {
          float v = rd<float>();
          std::memcpy(slot, &v, 4);
          break;
        }
        default:
          std::fprintf(stderr, "driver: unknown argument kind %d\n", kind);
          return 2;
      }
      params[i] = slot;
    }
    CUfunction fn;
    CUresult r = cuModuleGetFunction(&fn, mod, name.c_str());
    if (r == CUDA_SUCCESS && shared > 48 * 1024)
      r = cuFuncSetAttribute(fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, int(shared));
    if (r == CUDA_SUCCESS) r = cuLaunchKernel(fn, g[0], g[1], g[2], b[0], b[1], b[2], shared, nullptr, params.data(), nullptr);
    if (r == CUDA_SUCCESS) r = cuCtxSynchronize();
    wr<unsigned>(unsigned(r));
    for (unsigned i = 0; i < nbuf; i++) {
      if (r == CUDA_SUCCESS) CHECK(cuMemcpyDtoH(host[i].data(), dptr[i], host[i].size()));
      write_exact(host[i].data(), host[i].size());
      if (r == CUDA_SUCCESS) CHECK(cuMemFree(dptr[i]));
    }
    std::fflush(stdout);
    if (r != CUDA_SUCCESS) return 3;  // the context is gone after a failed launch
  }
  return 0;
}
