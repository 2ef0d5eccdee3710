// runner.cc: runs a kernel's grid on the CPU. Each CUDA thread is a fiber (glibc
// ucontext) with its own stack; a block's fibers run on one OS thread, switching
// only at barriers and shuffles; blocks are spread over worker threads. A barrier is
// released only when every thread of its scope (block or warp) waits at the same
// file:line having passed the same number of barriers; anything else (a thread that
// returned early, a barrier in divergent code) aborts naming kernel, block and
// thread. In reverse mode each round runs the block's threads from last to first,
// which exposes a missing barrier between a write and another thread's read.
#include "runner.h"

#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

thread_local uint3 threadIdx;
thread_local uint3 blockIdx;
thread_local dim3 blockDim;
thread_local dim3 gridDim;

namespace fsdp_cpu {

static std::map<std::string, KernelEntry>& registry() {
  static std::map<std::string, KernelEntry> m;
  return m;
}

void register_kernel(const char* name, const char* sig, int block, void* fn, Invoke invoke) {
  auto& r = registry();
  if (r.count(name)) {
    std::fprintf(stderr, "fakecuda: kernel %s registered twice\n", name);
    std::abort();
  }
  r[name] = KernelEntry{name, sig, block, fn, invoke};
}

const KernelEntry* find_kernel(const char* name) {
  auto& r = registry();
  auto it = r.find(name);
  return it == r.end() ? nullptr : &it->second;
}

std::vector<const KernelEntry*> all_kernels() {
  std::vector<const KernelEntry*> v;
  for (auto& kv : registry()) v.push_back(&kv.second);
  return v;
}

namespace {

enum State { kRunnable, kAtBlock, kAtWarp, kDone };

struct Fiber {
  ucontext_t ctx;
  char* stack = nullptr;
  State st = kRunnable;
  const char* file = "";
  int line = 0;
  unsigned long long passed = 0;  // barriers of this fiber's kind released so far
  unsigned long long warpPassed = 0;
};

struct Block {
  const KernelEntry* k;
  void** params;
  int n;  // threads
  std::vector<Fiber> fibers;
  ucontext_t sched;
  int cur = 0;
  std::vector<uint64_t> slots;
  std::vector<uint32_t> xchg;  // 16 words a thread for the warp-level primitives
  std::unique_ptr<char[]> dyn;
  size_t dynBytes = 0;
  // Each thread's cp.async copies not yet performed, and its committed groups.
  struct Copy {
    void* dst;
    const void* src;
    int bytes, srcBytes;
    unsigned long long group;
  };
  std::vector<std::vector<Copy>> copies;
  std::vector<unsigned long long> committed;
};

thread_local Block* cur_block = nullptr;

size_t stack_bytes() {
  static size_t s = [] {
    const char* e = std::getenv("FAKECUDA_STACK_KB");
    long kb = e ? std::atol(e) : 256;
    if (kb < 16 || kb > 65536) kb = 256;
    return size_t(kb) * 1024;
  }();
  return s;
}

// Stacks are kept across launches: mmap'd with a guard page below, so an overflow
// faults instead of corrupting a neighbour.
std::mutex stack_mu;
std::vector<char*> free_stacks;

char* get_stack() {
  {
    std::lock_guard<std::mutex> l(stack_mu);
    if (!free_stacks.empty()) {
      char* s = free_stacks.back();
      free_stacks.pop_back();
      return s;
    }
  }
  size_t page = size_t(sysconf(_SC_PAGESIZE));
  void* m = mmap(nullptr, stack_bytes() + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                 -1, 0);
  if (m == MAP_FAILED) {
    std::fprintf(stderr, "fakecuda: cannot map a fiber stack\n");
    std::abort();
  }
  mprotect(m, page, PROT_NONE);
  return static_cast<char*>(m) + page;
}

void put_stacks(std::vector<Fiber>& f) {
  std::lock_guard<std::mutex> l(stack_mu);
  for (auto& x : f)
    if (x.stack) free_stacks.push_back(x.stack);  // a worker that got no block has none
}

uint3 unflatten(unsigned i, dim3 d) { return uint3{i % d.x, (i / d.x) % d.y, i / (d.x * d.y)}; }

[[noreturn]] void fail(const Block* b, int tid, const char* fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  uint3 t = unflatten(unsigned(tid), blockDim);
  std::fprintf(stderr, "fakecuda: kernel %s block (%u,%u,%u) thread (%u,%u,%u): %s\n", b->k->name.c_str(), blockIdx.x,
               blockIdx.y, blockIdx.z, t.x, t.y, t.z, msg);
  std::fflush(stderr);
  std::abort();
}

void fiber_main() {
  Block* b = cur_block;
  b->k->invoke(b->k->fn, b->params);
  b->fibers[b->cur].st = kDone;
  // returning resumes uc_link, the scheduler
}

bool same_site(const Fiber& a, const Fiber& c) { return a.line == c.line && std::strcmp(a.file, c.file) == 0; }

const char* describe(const Fiber& f, char* buf, size_t n) {
  if (f.st == kDone) return "returned";
  std::snprintf(buf, n, "%s at %s:%d (after %llu)", f.st == kAtBlock ? "__syncthreads" : "a warp barrier", f.file,
                f.line, f.st == kAtBlock ? f.passed : f.warpPassed);
  return buf;
}

void run_block(Block& b, bool reverse) {
  for (int i = 0; i < b.n; i++) {
    Fiber& f = b.fibers[i];
    if (!f.stack) f.stack = get_stack();
    getcontext(&f.ctx);
    f.ctx.uc_stack.ss_sp = f.stack;
    f.ctx.uc_stack.ss_size = stack_bytes();
    f.ctx.uc_link = &b.sched;
    makecontext(&f.ctx, fiber_main, 0);
    f.st = kRunnable;
    f.passed = f.warpPassed = 0;
    b.copies[size_t(i)].clear();  // a GPU completes them; nobody can wait for them any more
    b.committed[size_t(i)] = 0;
  }
  for (;;) {
    for (int j = 0; j < b.n; j++) {
      int i = reverse ? b.n - 1 - j : j;
      Fiber& f = b.fibers[i];
      if (f.st != kRunnable) continue;
      b.cur = i;
      threadIdx = unflatten(unsigned(i), blockDim);
      swapcontext(&b.sched, &f.ctx);
    }
    // Nothing is runnable: every fiber waits at a barrier or has returned.
    bool done = true, released = false;
    for (auto& f : b.fibers) done = done && f.st == kDone;
    if (done) return;
    char d1[512], d2[512];
    for (int w = 0; w * 32 < b.n; w++) {
      int lo = w * 32, hi = std::min(b.n, lo + 32), first = -1;
      for (int i = lo; i < hi; i++)
        if (b.fibers[i].st == kAtWarp) first = i;
      if (first < 0) continue;
      for (int i = lo; i < hi; i++) {
        const Fiber& f = b.fibers[i];
        if (f.st != kAtWarp || !same_site(f, b.fibers[first]) || f.warpPassed != b.fibers[first].warpPassed)
          fail(&b, i, "warp divergence: this thread is %s while lane %d is %s", describe(f, d1, sizeof d1), first - lo,
               describe(b.fibers[first], d2, sizeof d2));
      }
      for (int i = lo; i < hi; i++) {
        b.fibers[i].st = kRunnable;
        b.fibers[i].warpPassed++;
      }
      released = true;
    }
    if (released) continue;
    const Fiber& f0 = b.fibers[0];
    for (int i = 0; i < b.n; i++) {
      const Fiber& f = b.fibers[i];
      if (f.st != kAtBlock || f0.st != kAtBlock || !same_site(f, f0) || f.passed != f0.passed)
        fail(&b, i, "barrier divergence: this thread is %s while thread 0 is %s", describe(f, d1, sizeof d1),
             describe(f0, d2, sizeof d2));
    }
    for (auto& f : b.fibers) {
      f.st = kRunnable;
      f.passed++;
    }
  }
}

}  // namespace

void block_barrier(const char* file, int line) {
  Block* b = cur_block;
  Fiber& f = b->fibers[b->cur];
  f.st = kAtBlock;
  f.file = file;
  f.line = line;
  swapcontext(&f.ctx, &b->sched);
}

void warp_barrier(unsigned mask, const char* file, int line) {
  check_mask(mask, "__syncwarp", file, line);
  Block* b = cur_block;
  Fiber& f = b->fibers[b->cur];
  f.st = kAtWarp;
  f.file = file;
  f.line = line;
  swapcontext(&f.ctx, &b->sched);
}

void check_mask(unsigned mask, const char* what, const char* file, int line) {
  Block* b = cur_block;
  int base = b->cur & ~31, lanes = std::min(32, b->n - base);
  unsigned full = lanes == 32 ? 0xffffffffu : (1u << lanes) - 1;
  if ((mask & full) != full)
    fail(b, b->cur, "%s at %s:%d with mask %#x: partial masks are not modelled by the CPU runner", what, file, line,
         mask);
}

uint64_t* shfl_slot(int tid) { return &cur_block->slots[size_t(tid)]; }

uint32_t* xchg(int tid) { return &cur_block->xchg[size_t(tid) * 16]; }

void check_shared(const void* p, size_t n, const char* what, const char* file, int line) {
  Block* b = cur_block;
  const char* lo = b->dyn.get();
  const char* q = static_cast<const char*>(p);
  if (!lo || q < lo || q + n > lo + b->dynBytes)
    fail(b, b->cur, "%s at %s:%d: address %p (%zu bytes) outside the block's %zu bytes of dynamic shared memory", what,
         file, line, p, n, b->dynBytes);
  if (size_t(q - lo) % n != 0)
    fail(b, b->cur, "%s at %s:%d: shared offset %td not a multiple of %zu", what, file, line, q - lo, n);
}

void cp_async(void* dst, const void* src, int bytes, int srcBytes) {
  Block* b = cur_block;
  check_shared(dst, size_t(bytes), "cp.async destination", "", 0);
  if (srcBytes < 0 || srcBytes > bytes) fail(b, b->cur, "cp.async: src-size %d outside [0, %d]", srcBytes, bytes);
  size_t t = size_t(b->cur);
  b->copies[t].push_back(Block::Copy{dst, src, bytes, srcBytes, b->committed[t]});
}

void cp_async_commit() { cur_block->committed[size_t(cur_block->cur)]++; }

void cp_async_wait(int n) {
  Block* b = cur_block;
  size_t t = size_t(b->cur);
  unsigned long long upto = b->committed[t] >= (unsigned long long)n ? b->committed[t] - n : 0;
  auto& q = b->copies[t];
  size_t keep = 0;
  for (size_t i = 0; i < q.size(); i++) {
    const Block::Copy& c = q[i];
    if (c.group < upto) {
      std::memcpy(c.dst, c.src, size_t(c.srcBytes));
      std::memset(static_cast<char*>(c.dst) + c.srcBytes, 0, size_t(c.bytes - c.srcBytes));
    } else {
      q[keep++] = c;
    }
  }
  q.resize(keep);
}

bool planted(const char* what) {
  static const char* e = std::getenv("FAKECUDA_PLANT");
  return e && std::strcmp(e, what) == 0;
}

void* dynamic_shared() { return cur_block->dyn.get(); }

int run(const KernelEntry* k, dim3 grid, dim3 block, size_t shared, void** params, bool reverse) {
  unsigned nblocks = grid.x * grid.y * grid.z;
  int nthreads = int(block.x * block.y * block.z);
  if (nblocks == 0 || nthreads == 0) return 0;
  static int hw = [] {
    const char* e = std::getenv("FAKECUDA_WORKERS");
    int n = e ? std::atoi(e) : int(std::thread::hardware_concurrency());
    return n < 1 ? 1 : n > 64 ? 64 : n;
  }();
  unsigned nworkers = std::min<unsigned>(unsigned(hw), nblocks);
  std::atomic<unsigned> next{0};
  auto work = [&] {
    Block b;
    b.k = k;
    b.params = params;
    b.n = nthreads;
    b.fibers.resize(size_t(nthreads));
    b.slots.resize(size_t(nthreads));
    b.xchg.resize(size_t(nthreads) * 16);
    b.copies.resize(size_t(nthreads));
    b.committed.resize(size_t(nthreads));
    cur_block = &b;
    blockDim = block;
    gridDim = grid;
    for (unsigned i; (i = next.fetch_add(1)) < nblocks;) {
      blockIdx = unflatten(i, grid);
      // Fresh, poisoned dynamic shared memory per block (0xff bytes are NaNs), so a
      // read before a write shows and an overrun is caught by AddressSanitizer.
      b.dyn.reset(shared ? new char[shared] : nullptr);  // malloc's 16-byte alignment, as a GPU's
      b.dynBytes = shared;
      if (shared) std::memset(b.dyn.get(), 0xff, shared);
      run_block(b, reverse);
    }
    cur_block = nullptr;
    put_stacks(b.fibers);
  };
  // Always on threads of our own, never the caller's: the caller may be a Go
  // thread in a cgo call, which should not have its stack switched under it.
  std::vector<std::thread> ts;
  for (unsigned w = 0; w < nworkers; w++) ts.emplace_back(work);
  for (auto& t : ts) t.join();
  return 0;
}

}  // namespace fsdp_cpu
