// libcuda.cc: a fake libcuda.so.1 for tests on machines without a GPU. It defines
// the driver-API calls the Go cuda device uses under their real prototypes (it
// includes the toolkit's cuda.h, whose macros give the _v2 symbol names, so a wrong
// prototype fails to compile). Device memory is host memory; cuModuleLoadData
// accepts a fatbin and cuModuleGetFunction finds kernels in the CPU runner's
// registry, compiled from the same .cu sources. By default every stream's work
// runs when it is issued, on the calling thread, so every stream is trivially in
// issue order; with FAKECUDA_STREAMS=async each stream runs its work on a thread
// of its own, in its order, concurrently with the other streams and the host, and
// only events order two streams, as on a GPU (FAKECUDA_STREAM_DELAY_US makes one
// stream late, so that a missing event wait shows as wrong data).
// Faults are injected through environment variables (README.md). Never part of
// the product.
#include <cuda.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include "runner.h"

namespace {

std::mutex mu;
bool initialized = false;
CUresult sticky = CUDA_SUCCESS;  // a launch failure corrupts the context, as on a GPU

struct Alloc {
  size_t bytes;
};
std::map<uintptr_t, Alloc> allocs;  // by start address
size_t used = 0, peak = 0;

struct Module {
  std::string image;  // the bytes loaded, to check a kernel is in it
};
std::set<Module*> modules;
struct Function {
  const fsdp_cpu::KernelEntry* k;
  int maxDynamicShared = 48 * 1024;
};
std::map<std::pair<Module*, std::string>, Function*> functions;
// Stream is a stream's queue. Synchronous streams run work at issue; an
// asynchronous one runs it on its worker thread, which never takes mu (so the
// driver's calls may wait for a stream while holding it).
struct Stream {
  int index = 0;   // creation order in the context: the device's compute stream is 0, comm 1
  long delayUs = 0;
  bool async = false;
  std::mutex m;
  std::condition_variable cv;
  std::deque<std::pair<char, std::function<void()>>> q;
  bool busy = false, stop = false;
  std::thread worker;
  // spans is the stream's timeline under FAKECUDA_TIMELINE: each operation's
  // kind (k kernel, h host function, c copy or memset, w event wait, r event
  // record) and its start and end in ms, the injected delay excluded.
  struct Span {
    char kind;
    double start, end;
  };
  std::vector<Span> spans;
  bool timeline = false;
};
std::map<CUstream, Stream*> streams;
int streamsCreated = 0;
// Event completion: a record bumps issued; its completion, run in its stream's
// order, raises done to that count. A wait captures issued when it is issued, as
// cuStreamWaitEvent waits for the most recent record.
struct Event {
  bool recorded = false;
  bool timing = true;  // false with CU_EVENT_DISABLE_TIMING: cuEventElapsedTime refuses it, as the driver does
  double ms = 0;
  uint64_t issued = 0, done = 0;
};
std::map<Event*, std::shared_ptr<Event>> events;  // work in flight keeps its event alive
std::mutex evMu;
std::condition_variable evCv;
std::map<std::string, int> launches;  // per kernel, for FAKECUDA_FAIL_LAUNCH
int ctxToken;                          // the one context is this address

long long env_ll(const char* name, long long def) {
  const char* e = std::getenv(name);
  return e && *e ? std::atoll(e) : def;
}

size_t mem_limit() { return size_t(env_ll("FAKECUDA_MEM_LIMIT", 80LL << 30)); }

double now_ms() {
  using namespace std::chrono;
  return duration<double, std::milli>(steady_clock::now().time_since_epoch()).count();
}

// in_alloc reports whether [p, p+n) lies inside one allocation.
bool in_alloc(uintptr_t p, size_t n) {
  auto it = allocs.upper_bound(p);
  if (it == allocs.begin()) return false;
  --it;
  return p >= it->first && p + n <= it->first + it->second.bytes;
}

void stream_loop(Stream* s) {
  std::unique_lock<std::mutex> l(s->m);
  for (;;) {
    s->cv.wait(l, [&] { return s->stop || !s->q.empty(); });
    if (s->q.empty()) return;
    char kind = s->q.front().first;
    std::function<void()> f = std::move(s->q.front().second);
    s->q.pop_front();
    s->busy = true;
    l.unlock();
    if (s->delayUs > 0) std::this_thread::sleep_for(std::chrono::microseconds(s->delayUs));
    double t0 = now_ms();
    f();
    double t1 = now_ms();
    l.lock();
    if (s->timeline) s->spans.push_back({kind, t0, t1});
    s->busy = false;
    s->cv.notify_all();
  }
}

// enqueue runs f in s's order: now on a synchronous stream (or stream 0), else
// on s's worker.
void enqueue(Stream* s, char kind, std::function<void()> f) {
  if (!s || !s->async) {
    f();
    return;
  }
  {
    std::lock_guard<std::mutex> l(s->m);
    s->q.emplace_back(kind, std::move(f));
  }
  s->cv.notify_all();
}

void drain(Stream* s) {
  if (!s || !s->async) return;
  std::unique_lock<std::mutex> l(s->m);
  s->cv.wait(l, [&] { return s->q.empty() && !s->busy; });
}

bool idle(Stream* s) {
  if (!s || !s->async) return true;
  std::lock_guard<std::mutex> l(s->m);
  return s->q.empty() && !s->busy;
}

// write_timeline writes s's spans to FAKECUDA_TIMELINE.<pid>.<stream>, one line
// each: "pid stream kind start_ms end_ms" (a file per stream: processes and
// streams never interleave).
void write_timeline(Stream* s) {
  const char* path = std::getenv("FAKECUDA_TIMELINE");
  if (!path || !*path || s->spans.empty()) return;
  std::string out;
  char line[128];
  for (const auto& sp : s->spans) {
    std::snprintf(line, sizeof line, "%d %d %c %.3f %.3f\n", int(getpid()), s->index, sp.kind, sp.start, sp.end);
    out += line;
  }
  std::string name = std::string(path) + "." + std::to_string(getpid()) + "." + std::to_string(s->index);
  if (FILE* f = std::fopen(name.c_str(), "w")) {
    std::fwrite(out.data(), 1, out.size(), f);
    std::fclose(f);
  }
}

// stop_stream drains s, ends its worker and writes its timeline.
void stop_stream(Stream* s) {
  drain(s);
  if (s->worker.joinable()) {
    {
      std::lock_guard<std::mutex> l(s->m);
      s->stop = true;
    }
    s->cv.notify_all();
    s->worker.join();
  }
  write_timeline(s);
  delete s;
}

// all_streams lists the streams (under mu) for drain_all, which must not hold it.
std::vector<Stream*> all_streams() {
  std::lock_guard<std::mutex> lock(mu);
  std::vector<Stream*> out;
  for (auto& kv : streams) out.push_back(kv.second);
  return out;
}

// drain_all waits for every stream, as the synchronous calls of the driver
// (cuCtxSynchronize, cuMemFree) do.
void drain_all() {
  for (Stream* s : all_streams()) drain(s);
}

// stream_delay_us parses FAKECUDA_STREAM_DELAY_US ("INDEX:US[,INDEX:US]").
long stream_delay_us(int index) {
  const char* e = std::getenv("FAKECUDA_STREAM_DELAY_US");
  if (!e) return 0;
  std::string spec(e);
  size_t pos = 0;
  while (pos < spec.size()) {
    size_t end = spec.find(',', pos);
    if (end == std::string::npos) end = spec.size();
    std::string item = spec.substr(pos, end - pos);
    size_t colon = item.find(':');
    if (colon != std::string::npos && std::atoi(item.c_str()) == index) return std::atol(item.c_str() + colon + 1);
    pos = end + 1;
  }
  return 0;
}

#define GUARD()                          \
  std::lock_guard<std::mutex> lock(mu);  \
  if (!initialized) return CUDA_ERROR_NOT_INITIALIZED; \
  if (sticky != CUDA_SUCCESS) return sticky

const char* err_name(CUresult r) {
  switch (r) {
#define E(x) \
  case x:    \
    return #x;
    E(CUDA_SUCCESS)
    E(CUDA_ERROR_INVALID_VALUE)
    E(CUDA_ERROR_OUT_OF_MEMORY)
    E(CUDA_ERROR_NOT_INITIALIZED)
    E(CUDA_ERROR_DEINITIALIZED)
    E(CUDA_ERROR_NO_DEVICE)
    E(CUDA_ERROR_INVALID_DEVICE)
    E(CUDA_ERROR_INVALID_IMAGE)
    E(CUDA_ERROR_INVALID_CONTEXT)
    E(CUDA_ERROR_INVALID_HANDLE)
    E(CUDA_ERROR_NOT_FOUND)
    E(CUDA_ERROR_NOT_READY)
    E(CUDA_ERROR_ILLEGAL_ADDRESS)
    E(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES)
    E(CUDA_ERROR_LAUNCH_FAILED)
    E(CUDA_ERROR_NOT_SUPPORTED)
    E(CUDA_ERROR_UNKNOWN)
#undef E
    default:
      return nullptr;
  }
}

}  // namespace

extern "C" {

CUresult cuGetErrorName(CUresult error, const char** pStr) {
  *pStr = err_name(error);
  return *pStr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuGetErrorString(CUresult error, const char** pStr) {
  switch (error) {
    case CUDA_ERROR_LAUNCH_FAILED:
      *pStr = "unspecified launch failure (injected by FAKECUDA_FAIL_LAUNCH)";
      return CUDA_SUCCESS;
    case CUDA_ERROR_OUT_OF_MEMORY:
      *pStr = "out of memory";
      return CUDA_SUCCESS;
    case CUDA_ERROR_NO_DEVICE:
      *pStr = "no CUDA-capable device is detected";
      return CUDA_SUCCESS;
    default:
      *pStr = err_name(error);
      return *pStr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
  }
}

CUresult cuInit(unsigned int flags) {
  std::lock_guard<std::mutex> lock(mu);
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  long long e = env_ll("FAKECUDA_INIT_ERROR", 0);
  if (e != 0) return CUresult(e);
  initialized = true;
  return CUDA_SUCCESS;
}

CUresult cuDriverGetVersion(int* v) {
  *v = CUDA_VERSION;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetCount(int* n) {
  GUARD();
  *n = 1;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGet(CUdevice* d, int ordinal) {
  GUARD();
  if (ordinal != 0) return CUDA_ERROR_INVALID_DEVICE;
  *d = 0;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetName(char* name, int len, CUdevice dev) {
  GUARD();
  if (dev != 0) return CUDA_ERROR_INVALID_DEVICE;
  if (len <= 0) return CUDA_ERROR_INVALID_VALUE;
  std::snprintf(name, size_t(len), "%s", "fakecuda CPU runner");
  return CUDA_SUCCESS;
}

CUresult cuDeviceTotalMem(size_t* bytes, CUdevice dev) {
  GUARD();
  if (dev != 0) return CUDA_ERROR_INVALID_DEVICE;
  *bytes = mem_limit();
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetAttribute(int* pi, CUdevice_attribute attrib, CUdevice dev) {
  GUARD();
  if (dev != 0) return CUDA_ERROR_INVALID_DEVICE;
  // An A100's figures: the kernels are compiled for sm_80 and sm_90.
  switch (attrib) {
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X:
      *pi = 1024;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X:
      *pi = 2147483647;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y:
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z:
      *pi = 65535;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK:
      *pi = 48 * 1024;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN:
      *pi = 163 * 1024;
      break;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE:
      *pi = 32;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK:
      *pi = 65536;
      break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT:
      *pi = 108;
      break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR:
      *pi = 8;
      break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR:
      *pi = 0;
      break;
    case CU_DEVICE_ATTRIBUTE_CLOCK_RATE:
      *pi = 1410000;
      break;
    case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE:
      *pi = 1215000;
      break;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH:
      *pi = 5120;
      break;
    case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE:
      *pi = 40 * 1024 * 1024;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR:
      *pi = 2048;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR:
      *pi = 164 * 1024;
      break;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING:
      *pi = 1;
      break;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

// ---- contexts: one, shared by the primary and created paths ----

int ctxRefs = 0;  // retains and creates not yet released or destroyed

// reset_context frees what the context held once its last reference goes, as the
// real driver does, and clears a sticky error: a new context starts clean.
void reset_context() {
  for (auto& kv : functions) delete kv.second;
  functions.clear();
  for (Module* m : modules) delete m;
  modules.clear();
  for (auto& kv : streams) stop_stream(kv.second);
  streams.clear();
  streamsCreated = 0;
  events.clear();
  for (auto& kv : allocs) std::free(reinterpret_cast<void*>(kv.first));
  allocs.clear();
  used = 0;
  sticky = CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice dev) {
  GUARD();
  if (dev != 0) return CUDA_ERROR_INVALID_DEVICE;
  ctxRefs++;
  *pctx = reinterpret_cast<CUcontext>(&ctxToken);
  return CUDA_SUCCESS;
}

CUresult cuCtxCreate(CUcontext* pctx, unsigned int, CUdevice dev) {
  GUARD();
  if (dev != 0) return CUDA_ERROR_INVALID_DEVICE;
  ctxRefs++;
  *pctx = reinterpret_cast<CUcontext>(&ctxToken);
  return CUDA_SUCCESS;
}

// Release and destroy work after a failure (they are how a program recovers).
CUresult cuDevicePrimaryCtxRelease(CUdevice dev) {
  std::lock_guard<std::mutex> lock(mu);
  if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (dev != 0) return CUDA_ERROR_INVALID_DEVICE;
  if (ctxRefs <= 0) return CUDA_ERROR_INVALID_CONTEXT;
  if (--ctxRefs == 0) reset_context();
  return CUDA_SUCCESS;
}

CUresult cuCtxDestroy(CUcontext ctx) {
  std::lock_guard<std::mutex> lock(mu);
  if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (ctx != reinterpret_cast<CUcontext>(&ctxToken) || ctxRefs <= 0) return CUDA_ERROR_INVALID_CONTEXT;
  if (--ctxRefs == 0) reset_context();
  return CUDA_SUCCESS;
}

CUresult cuCtxSetCurrent(CUcontext ctx) {
  GUARD();
  return ctx == nullptr || ctx == reinterpret_cast<CUcontext>(&ctxToken) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

CUresult cuCtxGetCurrent(CUcontext* pctx) {
  GUARD();
  *pctx = reinterpret_cast<CUcontext>(&ctxToken);
  return CUDA_SUCCESS;
}

CUresult cuCtxPushCurrent(CUcontext ctx) { return cuCtxSetCurrent(ctx); }

CUresult cuCtxPopCurrent(CUcontext* pctx) { return cuCtxGetCurrent(pctx); }

CUresult cuCtxGetDevice(CUdevice* d) {
  GUARD();
  *d = 0;
  return CUDA_SUCCESS;
}

CUresult cuCtxSynchronize() {
  drain_all();
  GUARD();
  return CUDA_SUCCESS;
}

// ---- memory ----

CUresult cuMemAlloc(CUdeviceptr* dptr, size_t bytes) {
  GUARD();
  if (bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  if (used + bytes > mem_limit()) return CUDA_ERROR_OUT_OF_MEMORY;
  size_t rounded = (bytes + 255) / 256 * 256;
  void* p = std::aligned_alloc(256, rounded);
  if (!p) return CUDA_ERROR_OUT_OF_MEMORY;
  // Poisoned (0xff bytes are NaNs) unless FAKECUDA_POISON=0: cuMemAlloc does not
  // zero, so code that forgets to clear shows.
  std::memset(p, env_ll("FAKECUDA_POISON", 1) ? 0xff : 0, rounded);
  allocs[reinterpret_cast<uintptr_t>(p)] = Alloc{bytes};
  used += bytes;
  if (used > peak) peak = used;
  *dptr = reinterpret_cast<CUdeviceptr>(p);
  return CUDA_SUCCESS;
}

CUresult cuMemFree(CUdeviceptr dptr) {
  drain_all();  // cuMemFree synchronizes the device
  GUARD();
  auto it = allocs.find(uintptr_t(dptr));
  if (it == allocs.end()) return CUDA_ERROR_INVALID_VALUE;
  used -= it->second.bytes;
  std::free(reinterpret_cast<void*>(dptr));
  allocs.erase(it);
  return CUDA_SUCCESS;
}

CUresult cuMemGetInfo(size_t* free, size_t* total) {
  GUARD();
  *total = mem_limit();
  *free = *total - used;
  return CUDA_SUCCESS;
}

CUresult cuMemcpyHtoD(CUdeviceptr dst, const void* src, size_t n) {
  drain_all();
  GUARD();
  if (n == 0) return CUDA_SUCCESS;
  if (!in_alloc(uintptr_t(dst), n)) return CUDA_ERROR_INVALID_VALUE;
  std::memcpy(reinterpret_cast<void*>(dst), src, n);
  return CUDA_SUCCESS;
}

CUresult cuMemcpyDtoH(void* dst, CUdeviceptr src, size_t n) {
  drain_all();
  GUARD();
  if (n == 0) return CUDA_SUCCESS;
  if (!in_alloc(uintptr_t(src), n)) return CUDA_ERROR_INVALID_VALUE;
  std::memcpy(dst, reinterpret_cast<void*>(src), n);
  return CUDA_SUCCESS;
}

CUresult cuMemcpyDtoD(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  drain_all();
  GUARD();
  if (n == 0) return CUDA_SUCCESS;
  if (!in_alloc(uintptr_t(dst), n) || !in_alloc(uintptr_t(src), n)) return CUDA_ERROR_INVALID_VALUE;
  std::memmove(reinterpret_cast<void*>(dst), reinterpret_cast<void*>(src), n);
  return CUDA_SUCCESS;
}

// stream_of returns s's queue (null for stream 0) or false for an unknown handle. mu is held.
static bool stream_of(CUstream s, Stream** out) {
  *out = nullptr;
  if (!s) return true;
  auto it = streams.find(s);
  if (it == streams.end()) return false;
  *out = it->second;
  return true;
}

CUresult cuMemcpyHtoDAsync(CUdeviceptr dst, const void* src, size_t n, CUstream stream) {
  GUARD();
  Stream* s;
  if (!stream_of(stream, &s)) return CUDA_ERROR_INVALID_HANDLE;
  if (n == 0) return CUDA_SUCCESS;
  if (!in_alloc(uintptr_t(dst), n)) return CUDA_ERROR_INVALID_VALUE;
  // From pageable memory the driver stages the source before returning.
  auto staged = std::make_shared<std::vector<char>>(static_cast<const char*>(src), static_cast<const char*>(src) + n);
  enqueue(s, 'c', [dst, staged] { std::memcpy(reinterpret_cast<void*>(dst), staged->data(), staged->size()); });
  return CUDA_SUCCESS;
}

CUresult cuMemcpyDtoHAsync(void* dst, CUdeviceptr src, size_t n, CUstream stream) {
  GUARD();
  Stream* s;
  if (!stream_of(stream, &s)) return CUDA_ERROR_INVALID_HANDLE;
  if (n == 0) return CUDA_SUCCESS;
  if (!in_alloc(uintptr_t(src), n)) return CUDA_ERROR_INVALID_VALUE;
  enqueue(s, 'c', [dst, src, n] { std::memcpy(dst, reinterpret_cast<void*>(src), n); });
  return CUDA_SUCCESS;
}

CUresult cuMemcpyDtoDAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream stream) {
  GUARD();
  Stream* s;
  if (!stream_of(stream, &s)) return CUDA_ERROR_INVALID_HANDLE;
  if (n == 0) return CUDA_SUCCESS;
  if (!in_alloc(uintptr_t(dst), n) || !in_alloc(uintptr_t(src), n)) return CUDA_ERROR_INVALID_VALUE;
  enqueue(s, 'c', [dst, src, n] { std::memmove(reinterpret_cast<void*>(dst), reinterpret_cast<void*>(src), n); });
  return CUDA_SUCCESS;
}

CUresult cuMemsetD32(CUdeviceptr dst, unsigned int v, size_t n) {
  drain_all();
  GUARD();
  if (n == 0) return CUDA_SUCCESS;
  if (dst % 4 != 0 || !in_alloc(uintptr_t(dst), n * 4)) return CUDA_ERROR_INVALID_VALUE;
  unsigned* p = reinterpret_cast<unsigned*>(dst);
  for (size_t i = 0; i < n; i++) p[i] = v;
  return CUDA_SUCCESS;
}

CUresult cuMemsetD32Async(CUdeviceptr dst, unsigned int v, size_t n, CUstream stream) {
  GUARD();
  Stream* s;
  if (!stream_of(stream, &s)) return CUDA_ERROR_INVALID_HANDLE;
  if (n == 0) return CUDA_SUCCESS;
  if (dst % 4 != 0 || !in_alloc(uintptr_t(dst), n * 4)) return CUDA_ERROR_INVALID_VALUE;
  enqueue(s, 'c', [dst, v, n] {
    unsigned* p = reinterpret_cast<unsigned*>(dst);
    for (size_t i = 0; i < n; i++) p[i] = v;
  });
  return CUDA_SUCCESS;
}

CUresult cuMemsetD8(CUdeviceptr dst, unsigned char v, size_t n) {
  drain_all();
  GUARD();
  if (n == 0) return CUDA_SUCCESS;
  if (!in_alloc(uintptr_t(dst), n)) return CUDA_ERROR_INVALID_VALUE;
  std::memset(reinterpret_cast<void*>(dst), v, n);
  return CUDA_SUCCESS;
}

// ---- modules and functions ----

CUresult cuModuleLoadData(CUmodule* module, const void* image) {
  GUARD();
  // A fatbin starts with magic 0xBA55ED50, a version (u16), its header size (u16)
  // and the size of what follows (u64).
  const unsigned char* b = static_cast<const unsigned char*>(image);
  unsigned magic;
  std::memcpy(&magic, b, 4);
  if (magic != 0xBA55ED50u) return CUDA_ERROR_INVALID_IMAGE;
  unsigned short hdr;
  unsigned long long size;
  std::memcpy(&hdr, b + 6, 2);
  std::memcpy(&size, b + 8, 8);
  if (hdr < 16 || size > (1ULL << 32)) return CUDA_ERROR_INVALID_IMAGE;
  Module* m = new Module{std::string(reinterpret_cast<const char*>(b), size_t(hdr + size))};
  modules.insert(m);
  *module = reinterpret_cast<CUmodule>(m);
  return CUDA_SUCCESS;
}

CUresult cuModuleUnload(CUmodule module) {
  GUARD();
  Module* m = reinterpret_cast<Module*>(module);
  if (!modules.erase(m)) return CUDA_ERROR_INVALID_HANDLE;
  for (auto it = functions.begin(); it != functions.end();) {
    if (it->first.first == m) {
      delete it->second;
      it = functions.erase(it);
    } else {
      ++it;
    }
  }
  delete m;
  return CUDA_SUCCESS;
}

CUresult cuModuleGetFunction(CUfunction* hfunc, CUmodule module, const char* name) {
  GUARD();
  Module* m = reinterpret_cast<Module*>(module);
  if (!modules.count(m)) return CUDA_ERROR_INVALID_HANDLE;
  const fsdp_cpu::KernelEntry* k = fsdp_cpu::find_kernel(name);
  // The kernel must be in the registry and its name in the image (a stale fatbin
  // lacks a new kernel).
  if (!k || m->image.find(std::string(name) + '\0') == std::string::npos) return CUDA_ERROR_NOT_FOUND;
  Function*& f = functions[{m, name}];
  if (!f) f = new Function{k};
  *hfunc = reinterpret_cast<CUfunction>(f);
  return CUDA_SUCCESS;
}

CUresult cuFuncSetAttribute(CUfunction hfunc, CUfunction_attribute attrib, int value) {
  GUARD();
  Function* f = reinterpret_cast<Function*>(hfunc);
  if (attrib != CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES) return CUDA_ERROR_NOT_SUPPORTED;
  if (value < 0 || value > 163 * 1024) return CUDA_ERROR_INVALID_VALUE;
  f->maxDynamicShared = value;
  return CUDA_SUCCESS;
}

CUresult cuFuncGetAttribute(int* pi, CUfunction_attribute attrib, CUfunction hfunc) {
  GUARD();
  Function* f = reinterpret_cast<Function*>(hfunc);
  switch (attrib) {
    case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
      *pi = f->k->block;
      return CUDA_SUCCESS;
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
      *pi = f->maxDynamicShared;
      return CUDA_SUCCESS;
    default:
      return CUDA_ERROR_NOT_SUPPORTED;
  }
}

CUresult cuLaunchKernel(CUfunction hfunc, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
                        unsigned int by, unsigned int bz, unsigned int shared, CUstream stream, void** params,
                        void** extra) {
  const fsdp_cpu::KernelEntry* k;
  bool reverse;
  Stream* st;
  {
    GUARD();
    Function* f = reinterpret_cast<Function*>(hfunc);
    bool found = false;
    for (auto& kv : functions) found = found || kv.second == f;
    if (!found) return CUDA_ERROR_INVALID_HANDLE;
    if (!stream_of(stream, &st)) return CUDA_ERROR_INVALID_HANDLE;
    k = f->k;
    // extra is not used by the device: parameters go through kernelParams.
    if (extra != nullptr || (params == nullptr && !k->sig.empty())) return CUDA_ERROR_INVALID_VALUE;
    if (gx == 0 || gy == 0 || gz == 0 || gy > 65535 || gz > 65535 || bx == 0 || by == 0 || bz == 0)
      return CUDA_ERROR_INVALID_VALUE;
    // The kernels are compiled with __launch_bounds__(block) and index their
    // threads assuming exactly that block (kernels.Kernel.Block): more threads fail
    // on a GPU too, fewer would compute garbage there, so both are refused here.
    if (bx * by * bz != unsigned(k->block)) {
      std::fprintf(stderr, "fakecuda: %s launched with block (%u,%u,%u), compiled for %d threads\n",
                   k->name.c_str(), bx, by, bz, k->block);
      return CUDA_ERROR_INVALID_VALUE;
    }
    if (int(shared) > f->maxDynamicShared) return CUDA_ERROR_INVALID_VALUE;
    // Pointer arguments must point into an allocation (or be null), as a guard
    // against a wrapper passing a host address or an integer where a pointer goes.
    for (size_t i = 0; i < k->sig.size(); i++) {
      if (k->sig[i] != 'p') continue;
      uintptr_t p;
      std::memcpy(&p, params[i], sizeof p);
      if (p != 0 && !in_alloc(p, 1)) {
        std::fprintf(stderr, "fakecuda: %s: parameter %zu (%#lx) is not device memory\n", k->name.c_str(), i,
                     (unsigned long)p);
        sticky = CUDA_ERROR_ILLEGAL_ADDRESS;
        return CUDA_SUCCESS;  // reported by the next call, as an asynchronous fault
      }
    }
    int nth = ++launches[k->name];
    if (const char* e = std::getenv("FAKECUDA_FAIL_LAUNCH")) {
      std::string spec(e), name = spec;
      int want = 1;
      size_t colon = spec.find(':');
      if (colon != std::string::npos) {
        name = spec.substr(0, colon);
        want = std::atoi(spec.c_str() + colon + 1);
      }
      int count = name == "*" ? 0 : nth;
      if (name == "*") {
        for (auto& kv : launches) count += kv.second;
      }
      if ((name == "*" || name == k->name) && count == want) {
        sticky = CUDA_ERROR_LAUNCH_FAILED;
        return CUDA_SUCCESS;  // asynchronous: the next call reports it
      }
    }
    reverse = std::getenv("FAKECUDA_SCHEDULE") && std::strcmp(std::getenv("FAKECUDA_SCHEDULE"), "reverse") == 0;
  }
  // Run outside the lock: kernels do not call the driver, and a long kernel must
  // not block another thread's memcpy (which the real driver would not either).
  // The parameters are copied now, as cuLaunchKernel does: params points into
  // the caller's frame.
  struct Args {
    std::vector<unsigned long long> vals;
    std::vector<void*> ptrs;
  };
  auto a = std::make_shared<Args>();
  a->vals.resize(k->sig.size());
  a->ptrs.resize(k->sig.size());
  for (size_t i = 0; i < k->sig.size(); i++) {
    std::memcpy(&a->vals[i], params[i], k->sig[i] == 'i' || k->sig[i] == 'f' ? 4 : 8);
    a->ptrs[i] = &a->vals[i];
  }
  dim3 grid{gx, gy, gz}, block{bx, by, bz};
  enqueue(st, 'k', [k, grid, block, shared, a, reverse] {
    fsdp_cpu::run(k, grid, block, shared, a->ptrs.empty() ? nullptr : a->ptrs.data(), reverse);
  });
  return CUDA_SUCCESS;
}

// ---- streams and events ----

CUresult cuStreamCreate(CUstream* ps, unsigned int) {
  GUARD();
  Stream* x = new Stream;
  x->index = streamsCreated++;
  const char* mode = std::getenv("FAKECUDA_STREAMS");
  x->async = mode && std::strcmp(mode, "async") == 0;
  x->delayUs = x->async ? stream_delay_us(x->index) : 0;
  x->timeline = x->async && std::getenv("FAKECUDA_TIMELINE") && *std::getenv("FAKECUDA_TIMELINE");
  if (x->async) x->worker = std::thread(stream_loop, x);
  CUstream h = reinterpret_cast<CUstream>(x);
  streams[h] = x;
  *ps = h;
  return CUDA_SUCCESS;
}

CUresult cuStreamDestroy(CUstream h) {
  Stream* x;
  {
    GUARD();
    auto it = streams.find(h);
    if (it == streams.end()) return CUDA_ERROR_INVALID_HANDLE;
    x = it->second;
    streams.erase(it);
  }
  stop_stream(x);
  return CUDA_SUCCESS;
}

CUresult cuStreamSynchronize(CUstream h) {
  Stream* x;
  {
    GUARD();
    if (!stream_of(h, &x)) return CUDA_ERROR_INVALID_HANDLE;
  }
  if (h == nullptr) {
    drain_all();
  } else {
    drain(x);
  }
  GUARD();
  return CUDA_SUCCESS;
}

CUresult cuStreamQuery(CUstream h) {
  GUARD();
  Stream* x;
  if (!stream_of(h, &x)) return CUDA_ERROR_INVALID_HANDLE;
  return idle(x) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

// cuLaunchHostFunc runs fn(userData) in the stream's order. The fake cuBLAS and
// the fake NCCL enqueue their work through it, so that a GEMM or a collective
// runs where the stream is, not where the host is.
CUresult cuLaunchHostFunc(CUstream h, CUhostFn fn, void* userData) {
  Stream* x;
  {
    GUARD();
    if (!stream_of(h, &x) || fn == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  }
  // Outside the lock: a collective waits for other processes.
  enqueue(x, 'h', [fn, userData] { fn(userData); });
  return CUDA_SUCCESS;
}

CUresult cuEventCreate(CUevent* e, unsigned int flags) {
  GUARD();
  auto x = std::make_shared<Event>();
  x->timing = (flags & CU_EVENT_DISABLE_TIMING) == 0;
  events[x.get()] = x;
  *e = reinterpret_cast<CUevent>(x.get());
  return CUDA_SUCCESS;
}

// cuEventDestroy may be called while the event's record or a wait for it is
// still queued; the queued work holds its own reference.
CUresult cuEventDestroy(CUevent e) {
  GUARD();
  if (!events.erase(reinterpret_cast<Event*>(e))) return CUDA_ERROR_INVALID_HANDLE;
  return CUDA_SUCCESS;
}

CUresult cuEventRecord(CUevent e, CUstream h) {
  GUARD();
  auto it = events.find(reinterpret_cast<Event*>(e));
  Stream* x;
  if (it == events.end() || !stream_of(h, &x)) return CUDA_ERROR_INVALID_HANDLE;
  std::shared_ptr<Event> ev = it->second;
  uint64_t target;
  {
    std::lock_guard<std::mutex> l(evMu);
    target = ++ev->issued;
  }
  enqueue(x, 'r', [ev, target] {
    std::lock_guard<std::mutex> l(evMu);
    if (ev->done < target) ev->done = target;
    ev->recorded = true;
    ev->ms = now_ms();
    evCv.notify_all();
  });
  return CUDA_SUCCESS;
}

CUresult cuEventSynchronize(CUevent e) {
  std::shared_ptr<Event> ev;
  {
    GUARD();
    auto it = events.find(reinterpret_cast<Event*>(e));
    if (it == events.end()) return CUDA_ERROR_INVALID_HANDLE;
    ev = it->second;
  }
  std::unique_lock<std::mutex> l(evMu);
  uint64_t target = ev->issued;
  evCv.wait(l, [&] { return ev->done >= target; });
  return CUDA_SUCCESS;
}

CUresult cuEventQuery(CUevent e) {
  GUARD();
  auto it = events.find(reinterpret_cast<Event*>(e));
  if (it == events.end()) return CUDA_ERROR_INVALID_HANDLE;
  std::lock_guard<std::mutex> l(evMu);
  return it->second->done >= it->second->issued ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

CUresult cuEventElapsedTime(float* ms, CUevent start, CUevent end) {
  GUARD();
  auto a = events.find(reinterpret_cast<Event*>(start)), b = events.find(reinterpret_cast<Event*>(end));
  if (a == events.end() || b == events.end()) return CUDA_ERROR_INVALID_HANDLE;
  std::lock_guard<std::mutex> l(evMu);
  if (!a->second->recorded || !b->second->recorded || !a->second->timing || !b->second->timing)
    return CUDA_ERROR_INVALID_HANDLE;
  *ms = float(b->second->ms - a->second->ms);
  return CUDA_SUCCESS;
}

CUresult cuStreamWaitEvent(CUstream h, CUevent e, unsigned int flags) {
  GUARD();
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  auto it = events.find(reinterpret_cast<Event*>(e));
  Stream* x;
  if (it == events.end() || !stream_of(h, &x)) return CUDA_ERROR_INVALID_HANDLE;
  std::shared_ptr<Event> ev = it->second;
  uint64_t target;
  {
    std::lock_guard<std::mutex> l(evMu);
    target = ev->issued;
  }
  if (target == 0) return CUDA_SUCCESS;  // never recorded: nothing to wait for
  enqueue(x, 'w', [ev, target] {
    std::unique_lock<std::mutex> l(evMu);
    evCv.wait(l, [&] { return ev->done >= target; });
  });
  return CUDA_SUCCESS;
}

// ---- for tests only (not driver API) ----

// fakecuda_kernels writes "name block sig\n" per registered kernel into buf and
// returns the length needed.
size_t fakecuda_kernels(char* buf, size_t n) {
  std::string s;
  for (auto* k : fsdp_cpu::all_kernels()) s += k->name + " " + std::to_string(k->block) + " " + k->sig + "\n";
  if (buf && n) std::snprintf(buf, n, "%s", s.c_str());
  return s.size() + 1;
}

// fakecuda_mem_used returns the bytes allocated now (a leak check for tests).
size_t fakecuda_mem_used() {
  std::lock_guard<std::mutex> lock(mu);
  return used;
}

}  // extern "C"
