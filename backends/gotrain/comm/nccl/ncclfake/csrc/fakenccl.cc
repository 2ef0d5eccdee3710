// A fake libnccl.so.2 for tests: NCCL's public C API over POSIX shared memory
// between processes (or threads), on host pointers, so the NCCL communicator's
// Go code runs against it with the cpu device's buffers as "device pointers".
// Never linked into the product; the tests build it with g++.
//
// A collective given a stream runs in that stream's order when the fake libcuda
// is loaded in the process (through its cuLaunchHostFunc, on the stream's thread
// under FAKECUDA_STREAMS=async), as NCCL's kernels run on the stream; its
// failures then become the communicator's asynchronous error. Without a stream,
// or without the fake libcuda, it runs when it is called.
//
// Every collective moves data in chunks through one shared slot per rank:
// each rank writes its part, a barrier, each rank reads what it needs, a
// barrier. Reductions follow the TCP ring's documented order (segment j of
// an all-reduce, chunk j of a reduce-scatter: ((x[j+1] + x[j+2]) + ...) + x[j],
// then / size for average), so a parity test against the ring that fails
// points at a bug, not at rounding.
//
// Environment (read when a communicator is created):
//   FSDPBENCH_FAKE_NCCL_VERSION  the version ncclGetVersion reports (default 22703)
//   FSDPBENCH_FAKE_NCCL_FAULT    "async:R:K" - on the process whose RANK is R, the
//                                K-th collective (counted over the process) does not
//                                take part and raises an asynchronous ncclSystemError;
//                                "hang:R:K" - that process stops (SIGSTOP), as a hung
//                                host does; "dupgpu" - ncclCommInitRank fails with
//                                ncclInvalidUsage, as NCCL before 2.30 does for two
//                                ranks on one GPU.
#include <atomic>
#include <dlfcn.h>
#include <functional>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include <vector>
#include <algorithm>

extern "C" {
typedef struct { char internal[128]; } ncclUniqueId;
typedef struct ncclComm* ncclComm_t;
typedef enum { ncclSuccess = 0, ncclUnhandledCudaError = 1, ncclSystemError = 2, ncclInternalError = 3,
               ncclInvalidArgument = 4, ncclInvalidUsage = 5, ncclRemoteError = 6, ncclInProgress = 7 } ncclResult_t;
typedef enum { ncclFloat32 = 7, ncclBfloat16 = 9 } ncclDataType_t;
typedef enum { ncclSum = 0, ncclProd = 1, ncclMax = 2, ncclMin = 3, ncclAvg = 4 } ncclRedOp_t;
}

namespace {

constexpr uint32_t kMagic = 0x46414b45;  // "FAKE"
constexpr int kMaxRanks = 64;
constexpr size_t kSlotFloats = 1 << 16;  // 256 KiB per rank
constexpr int kJoinSeconds = 60;

struct Shared {
  uint32_t magic;
  int32_t nranks;
  std::atomic<int32_t> joined;
  std::atomic<uint64_t> arrivals;
  // Per rank: the op each rank is in (kind, count, seq), checked after the first
  // barrier so a desync is an error, not garbage; and split's color and key.
  int64_t meta[kMaxRanks][4];
};

size_t mapBytes(int nranks) { return sizeof(Shared) + sizeof(float) * kSlotFloats * nranks; }

std::atomic<uint64_t> gCalls{0};  // collectives issued by this process

}  // namespace

struct ncclComm {
  Shared* sh;
  size_t len;
  int rank, nranks;
  uint64_t barriers;   // barriers passed by this rank
  uint64_t seq;        // collectives issued on this communicator
  int splits;          // splits issued, for the child's shared-memory name
  char name[64];
  std::atomic<int> aborted;
  std::atomic<int> asyncErr;
  std::atomic<int> inflight;
  char lastError[256];
};

namespace {

float* slot(ncclComm* c, int r) {
  return reinterpret_cast<float*>(reinterpret_cast<char*>(c->sh) + sizeof(Shared)) + size_t(r) * kSlotFloats;
}

void pause(int& spins) {
  if (++spins < 64) return;
  struct timespec ts = {0, spins < 1000 ? 20000 : 200000};
  nanosleep(&ts, nullptr);
}

// barrier waits until every rank arrived as often as this one; the counter only
// grows, so no reset races. An abort (another thread, ncclCommAbort) ends it.
ncclResult_t barrier(ncclComm* c) {
  uint64_t target = ++c->barriers * uint64_t(c->nranks);
  c->sh->arrivals.fetch_add(1);
  int spins = 0;
  while (c->sh->arrivals.load() < target) {
    if (c->aborted.load()) {
      snprintf(c->lastError, sizeof c->lastError, "fake nccl: communicator aborted while rank %d waited for its peers", c->rank);
      return ncclInternalError;
    }
    pause(spins);
  }
  return ncclSuccess;
}

int envInt(const char* name, int def) {
  const char* v = getenv(name);
  return v && *v ? atoi(v) : def;
}

// fault applies FSDPBENCH_FAKE_NCCL_FAULT to this process's n-th collective;
// true: skip the collective (an asynchronous error was raised).
bool fault(ncclComm* c, uint64_t n) {
  const char* f = getenv("FSDPBENCH_FAKE_NCCL_FAULT");
  if (!f || !*f) return false;
  char kind[16] = {0};
  int rank = -1;
  unsigned long long after = 0;
  if (sscanf(f, "%15[a-z]:%d:%llu", kind, &rank, &after) != 3) return false;
  if (rank != envInt("RANK", -2) || n != after) return false;
  if (strcmp(kind, "hang") == 0) {
    raise(SIGSTOP);
    return false;
  }
  if (strcmp(kind, "async") == 0) {
    snprintf(c->lastError, sizeof c->lastError, "fake nccl: injected asynchronous error on rank %d at collective %llu", rank, after);
    c->asyncErr.store(ncclSystemError);
    return true;
  }
  return false;
}

ncclResult_t openShared(ncclComm* c, const char* name, int nranks, int rank) {
  if (nranks < 1 || nranks > kMaxRanks || rank < 0 || rank >= nranks) return ncclInvalidArgument;
  snprintf(c->name, sizeof c->name, "%s", name);
  c->rank = rank;
  c->nranks = nranks;
  c->len = mapBytes(nranks);
  int fd = shm_open(name, O_CREAT | O_RDWR, 0600);
  if (fd < 0) return ncclSystemError;
  if (ftruncate(fd, off_t(c->len)) != 0) {
    close(fd);
    return ncclSystemError;
  }
  void* p = mmap(nullptr, c->len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) return ncclSystemError;
  c->sh = static_cast<Shared*>(p);
  c->sh->joined.fetch_add(1);
  struct timespec start;
  clock_gettime(CLOCK_MONOTONIC, &start);
  int spins = 0;
  while (c->sh->joined.load() < nranks) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (now.tv_sec - start.tv_sec > kJoinSeconds) {
      munmap(p, c->len);
      return ncclSystemError;
    }
    pause(spins);
  }
  if (c->sh->joined.load() > nranks) return ncclInvalidUsage;
  // Every rank has mapped the segment: it can go from the namespace now, so
  // nothing is left behind in /dev/shm whatever happens later.
  if (rank == 0) shm_unlink(name);
  c->sh->magic = kMagic;
  c->sh->nranks = nranks;
  return barrier(c);
}

// Guard counts a call in flight, so ncclCommAbort frees nothing under it.
struct Guard {
  ncclComm* c;
  explicit Guard(ncclComm* c) : c(c) { c->inflight.fetch_add(1); }
  ~Guard() { c->inflight.fetch_sub(1); }
};

// onStream runs body in the order of stream (see the top of the file) and
// returns at once, or runs it now without a stream or a fake libcuda. The
// communicator counts it in flight until it ran, so an abort waits for it.
ncclResult_t onStream(ncclComm* c, void* stream, std::function<ncclResult_t()> body) {
  typedef int (*launchFn)(void*, void (*)(void*), void*);
  launchFn launch = nullptr;
  if (stream) {
    const char* path = getenv("FSDPBENCH_LIBCUDA");
    void* lib = dlopen(path && *path ? path : "libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
    if (lib) {
      launch = reinterpret_cast<launchFn>(dlsym(lib, "cuLaunchHostFunc"));
      dlclose(lib);
    }
  }
  if (!launch) {
    Guard g(c);
    return body();
  }
  struct Job {
    ncclComm* c;
    std::function<ncclResult_t()> body;
  };
  c->inflight.fetch_add(1);
  Job* j = new Job{c, std::move(body)};
  auto run = [](void* p) {
    Job* j = static_cast<Job*>(p);
    ncclResult_t r = j->body();
    int none = ncclSuccess;
    if (r != ncclSuccess) j->c->asyncErr.compare_exchange_strong(none, r);
    j->c->inflight.fetch_sub(1);
    delete j;
  };
  if (launch(stream, run, j) != 0) {
    c->inflight.fetch_sub(1);
    delete j;
    snprintf(c->lastError, sizeof c->lastError, "fake nccl: cuLaunchHostFunc refused the stream");
    return ncclUnhandledCudaError;
  }
  return ncclSuccess;
}

// begin validates a collective, applies faults and checks that every rank is
// in the same one; skip is set when a fault swallowed it.
ncclResult_t begin(ncclComm* c, int kind, size_t count, int dt, bool& skip) {
  skip = false;
  if (!c || !c->sh) return ncclInvalidArgument;
  if (c->aborted.load()) return ncclInvalidUsage;
  // bf16 moves bits only, so the all-gather (kind 1) takes it; a bf16 reduction
  // would need bf16 arithmetic, which the trainer never asks for (reduce_dtype fp32).
  if (dt != ncclFloat32 && !(dt == ncclBfloat16 && kind == 1)) {
    snprintf(c->lastError, sizeof c->lastError, "fake nccl: only ncclFloat32 (and ncclBfloat16 for all-gather) is implemented, got %d for op %d", dt, kind);
    return ncclInvalidArgument;
  }
  if (c->asyncErr.load() != ncclSuccess) return ncclInvalidUsage;
  if (fault(c, ++gCalls)) {
    skip = true;
    return ncclSuccess;
  }
  c->seq++;
  int64_t* m = c->sh->meta[c->rank];
  m[0] = kind + 256 * dt;  // ranks must agree on the datatype too
  m[1] = int64_t(count);
  m[2] = int64_t(c->seq);
  ncclResult_t r = barrier(c);
  if (r != ncclSuccess) return r;
  for (int q = 0; q < c->nranks; q++) {
    int64_t* o = c->sh->meta[q];
    if (o[0] != kind + 256 * dt || o[1] != int64_t(count) || o[2] != int64_t(c->seq)) {
      snprintf(c->lastError, sizeof c->lastError, "fake nccl: rank %d issued op %lld count %lld #%lld, rank %d op %d count %zu #%llu",
               q, (long long)o[0], (long long)o[1], (long long)o[2], c->rank, kind, count, (unsigned long long)c->seq);
      return ncclInvalidUsage;
    }
  }
  return barrier(c);
}

int mod(int a, int n) { return ((a % n) + n) % n; }

// ringReduce reduces element i of the slots for segment owner j, in the ring's order.
float ringReduce(ncclComm* c, size_t i, int owner, int op) {
  int n = c->nranks;
  float acc = slot(c, mod(owner + 1, n))[i];
  for (int k = 2; k <= n; k++) acc = slot(c, mod(owner + k, n))[i] + acc;
  if (op == ncclAvg) acc = acc / float(n);
  return acc;
}

// segOwner is the segment of element i when n elements are cut in size parts
// as the ring's all-reduce cuts them (the first n % size parts one longer).
int segOwner(size_t i, size_t n, int size) {
  size_t base = n / size, rem = n % size;
  size_t big = rem * (base + 1);
  if (i < big) return int(i / (base + 1));
  return int(rem + (i - big) / base);
}

ncclResult_t checkOp(ncclComm* c, int op) {
  if (op == ncclSum || op == ncclAvg) return ncclSuccess;
  snprintf(c->lastError, sizeof c->lastError, "fake nccl: only ncclSum and ncclAvg are implemented, got %d", op);
  return ncclInvalidArgument;
}

}  // namespace

extern "C" {

// fsdpbenchFakeNCCL marks this library as the fake: its "device pointers" are
// host pointers, so the communicator may pass host memory to it.
int fsdpbenchFakeNCCL(void) { return 1; }

ncclResult_t ncclGetVersion(int* version) {
  if (!version) return ncclInvalidArgument;
  *version = envInt("FSDPBENCH_FAKE_NCCL_VERSION", 22703);
  return ncclSuccess;
}

const char* ncclGetErrorString(ncclResult_t r) {
  switch (r) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
  }
  return "unknown result code";
}

const char* ncclGetLastError(ncclComm_t c) { return c ? c->lastError : ""; }

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  if (!id) return ncclInvalidArgument;
  memset(id, 0, sizeof *id);
  unsigned char rnd[8];
  FILE* f = fopen("/dev/urandom", "rb");
  if (!f || fread(rnd, 1, sizeof rnd, f) != sizeof rnd) {
    if (f) fclose(f);
    return ncclSystemError;
  }
  fclose(f);
  int n = snprintf(id->internal, sizeof id->internal, "/fsdpfake-%d-", int(getpid()));
  for (int i = 0; i < 8; i++) n += snprintf(id->internal + n, sizeof id->internal - n, "%02x", rnd[i]);
  return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  if (!comm) return ncclInvalidArgument;
  const char* f = getenv("FSDPBENCH_FAKE_NCCL_FAULT");
  if (f && strcmp(f, "dupgpu") == 0) return ncclInvalidUsage;  // NCCL < 2.30: "Duplicate GPU detected"
  if (strncmp(id.internal, "/fsdpfake-", 10) != 0 || memchr(id.internal, 0, sizeof id.internal) == nullptr) return ncclInvalidArgument;
  ncclComm* c = new ncclComm();
  ncclResult_t r = openShared(c, id.internal, nranks, rank);
  if (r != ncclSuccess) {
    delete c;
    return r;
  }
  *comm = c;
  return ncclSuccess;
}

ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm, void* config) {
  (void)config;
  if (!comm || !newcomm) return ncclInvalidArgument;
  Guard g(comm);
  *newcomm = nullptr;
  int64_t* m = comm->sh->meta[comm->rank];
  m[0] = -1;
  m[1] = color;
  m[2] = key;
  m[3] = comm->splits;
  ncclResult_t r = barrier(comm);
  if (r != ncclSuccess) return r;
  std::vector<std::pair<int64_t, int>> members;
  for (int q = 0; q < comm->nranks; q++) {
    int64_t* o = comm->sh->meta[q];
    if (o[0] != -1 || o[3] != comm->splits) {
      snprintf(comm->lastError, sizeof comm->lastError, "fake nccl: rank %d is not in split #%d", q, comm->splits);
      return ncclInvalidUsage;
    }
    if (color >= 0 && o[1] == color) members.push_back({o[2], q});
  }
  r = barrier(comm);  // meta is read; the next op may overwrite it
  if (r != ncclSuccess) return r;
  int split = comm->splits++;
  if (color < 0) return ncclSuccess;  // NCCL_SPLIT_NOCOLOR
  std::sort(members.begin(), members.end());
  int newRank = 0;
  for (size_t i = 0; i < members.size(); i++)
    if (members[i].second == comm->rank) newRank = int(i);
  char name[64];
  snprintf(name, sizeof name, "%.40s-s%d-c%d", comm->name, split, color);
  ncclComm* c = new ncclComm();
  r = openShared(c, name, int(members.size()), newRank);
  if (r != ncclSuccess) {
    delete c;
    return r;
  }
  *newcomm = c;
  return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  if (!comm || !count) return ncclInvalidArgument;
  *count = comm->nranks;
  return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  if (!comm || !rank) return ncclInvalidArgument;
  *rank = comm->rank;
  return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* err) {
  if (!comm || !err) return ncclInvalidArgument;
  *err = ncclResult_t(comm->asyncErr.load());
  return ncclSuccess;
}

static ncclResult_t release(ncclComm_t comm) {
  int spins = 0;
  while (comm->inflight.load() > 0) pause(spins);
  munmap(comm->sh, comm->len);
  delete comm;
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (!comm) return ncclSuccess;
  comm->aborted.store(1);
  return release(comm);
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (!comm) return ncclSuccess;
  return release(comm);
}

ncclResult_t ncclGroupStart(void) { return ncclSuccess; }
ncclResult_t ncclGroupEnd(void) { return ncclSuccess; }

ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t dt, ncclComm_t comm, void* stream) {
  if (!comm) return ncclInvalidArgument;
  return onStream(comm, stream, [=]() -> ncclResult_t {
    bool skip;
    ncclResult_t r = begin(comm, 1, sendcount, dt, skip);
    if (r != ncclSuccess || skip) return r;
    // Bytes, not floats: an element is 4 bytes (ncclFloat32) or 2 (ncclBfloat16).
    // In place (sendbuff is this rank's part of recvbuff) works: the part goes
    // through the shared slot and comes back unchanged.
    const size_t es = dt == ncclBfloat16 ? 2 : 4, slotElems = kSlotFloats * sizeof(float) / es;
    const char* src = static_cast<const char*>(sendbuff);
    char* dst = static_cast<char*>(recvbuff);
    for (size_t off = 0; off < sendcount; off += slotElems) {
      size_t n = std::min(slotElems, sendcount - off);
      memmove(slot(comm, comm->rank), src + off * es, n * es);
      if ((r = barrier(comm)) != ncclSuccess) return r;
      for (int q = 0; q < comm->nranks; q++) memmove(dst + (size_t(q) * sendcount + off) * es, slot(comm, q), n * es);
      if ((r = barrier(comm)) != ncclSuccess) return r;
    }
    return ncclSuccess;
  });
}

ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t dt, ncclRedOp_t op, ncclComm_t comm, void* stream) {
  if (!comm) return ncclInvalidArgument;
  return onStream(comm, stream, [=]() -> ncclResult_t {
    if (ncclResult_t r = checkOp(comm, op); r != ncclSuccess) return r;
    bool skip;
    ncclResult_t r = begin(comm, 2, recvcount, dt, skip);
    if (r != ncclSuccess || skip) return r;
    const float* src = static_cast<const float*>(sendbuff);
    float* dst = static_cast<float*>(recvbuff);
    size_t chunk = kSlotFloats / size_t(comm->nranks);
    for (size_t off = 0; off < recvcount; off += chunk) {
      size_t n = std::min(chunk, recvcount - off);
      for (int q = 0; q < comm->nranks; q++) memcpy(slot(comm, comm->rank) + size_t(q) * chunk, src + size_t(q) * recvcount + off, n * sizeof(float));
      if ((r = barrier(comm)) != ncclSuccess) return r;
      for (size_t i = 0; i < n; i++) dst[off + i] = ringReduce(comm, size_t(comm->rank) * chunk + i, comm->rank, op);
      if ((r = barrier(comm)) != ncclSuccess) return r;
    }
    return ncclSuccess;
  });
}

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t dt, ncclRedOp_t op, ncclComm_t comm, void* stream) {
  if (!comm) return ncclInvalidArgument;
  return onStream(comm, stream, [=]() -> ncclResult_t {
    if (ncclResult_t r = checkOp(comm, op); r != ncclSuccess) return r;
    bool skip;
    ncclResult_t r = begin(comm, 3, count, dt, skip);
    if (r != ncclSuccess || skip) return r;
    const float* src = static_cast<const float*>(sendbuff);
    float* dst = static_cast<float*>(recvbuff);
    for (size_t off = 0; off < count; off += kSlotFloats) {
      size_t n = std::min(kSlotFloats, count - off);
      memcpy(slot(comm, comm->rank), src + off, n * sizeof(float));
      if ((r = barrier(comm)) != ncclSuccess) return r;
      for (size_t i = 0; i < n; i++) dst[off + i] = ringReduce(comm, i, segOwner(off + i, count, comm->nranks), op);
      if ((r = barrier(comm)) != ncclSuccess) return r;
    }
    return ncclSuccess;
  });
}

ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t dt, int root, ncclComm_t comm, void* stream) {
  if (!comm) return ncclInvalidArgument;
  return onStream(comm, stream, [=]() -> ncclResult_t {
    if (root < 0 || root >= comm->nranks) return ncclInvalidArgument;
    bool skip;
    ncclResult_t r = begin(comm, 4 + 16 * root, count, dt, skip);
    if (r != ncclSuccess || skip) return r;
    const float* src = static_cast<const float*>(sendbuff);
    float* dst = static_cast<float*>(recvbuff);
    for (size_t off = 0; off < count; off += kSlotFloats) {
      size_t n = std::min(kSlotFloats, count - off);
      if (comm->rank == root) memcpy(slot(comm, root), src + off, n * sizeof(float));
      if ((r = barrier(comm)) != ncclSuccess) return r;
      if (comm->rank != root || dst != src) memcpy(dst + off, slot(comm, root), n * sizeof(float));
      if ((r = barrier(comm)) != ncclSuccess) return r;
    }
    return ncclSuccess;
  });
}

}  // extern "C"
