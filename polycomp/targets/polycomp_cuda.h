/* polycomp_cuda.h: what every generated .cu includes first (targets `cuda` and
 * `cuda-emulated`, issue 14).
 *
 * Under nvcc (__CUDACC__) it is real CUDA plus a few host macros. Otherwise (g++
 * -std=c++17 -pthread: the `cuda-emulated` target) it is a small CPU emulation of the
 * part of CUDA that generated code uses, so a kernel can be run against numpy, and
 * checked by ThreadSanitizer, on a machine without a GPU.
 *
 * Host macros (both modes). Each one that can fail leaves the enclosing host entry
 * through POLYCOMP_FAIL(status), which is `return (status)` unless the including file
 * defines it first (e.g. to record the status and `goto` a cleanup label):
 *
 *   POLYCOMP_ALLOC(ptr, bytes)          device memory into the typed pointer `ptr`
 *   POLYCOMP_COPY_IN(dev, host, bytes)  host -> device
 *   POLYCOMP_COPY_OUT(host, dev, bytes) device -> host
 *   POLYCOMP_FREE(ptr)                  frees `ptr` and sets it to a null pointer
 *   POLYCOMP_LAUNCH(kernel, grid, block, args...)   kernel<<<grid, block>>>(args...)
 *   POLYCOMP_LAUNCH_CHECK()             after each launch: a refused launch fails here
 *                                       (in the emulation, POLYCOMP_LAUNCH itself fails)
 *   POLYCOMP_SYNC()                     waits for the device; a kernel's fault fails here
 *   POLYCOMP_STATUS_WORD(ptr)           the device entry's status word, zeroed: one int
 *                                       of device memory per host thread (and device),
 *                                       made on first use and kept, since a cudaMalloc
 *                                       and a cudaFree (which waits for the whole device)
 *                                       per call would cost more than a small kernel
 *
 * Status codes (beside codegen/c.py's 1-3; polycomp/cuda.py STATUS_MESSAGES mirrors
 * them and tests/test_cuda_emulation.py checks that they agree):
 */
#ifndef POLYCOMP_CUDA_H
#define POLYCOMP_CUDA_H

#define POLYCOMP_STATUS_CUDA_LAUNCH 20 /* launch refused: block or grid size out of range */
#define POLYCOMP_STATUS_CUDA_ALLOC 21  /* device memory could not be allocated */
#define POLYCOMP_STATUS_CUDA_COPY 22   /* a copy failed (or reported an earlier kernel fault) */
#define POLYCOMP_STATUS_CUDA_FREE 23   /* freeing device memory failed */
#define POLYCOMP_STATUS_CUDA_SYNC 24   /* a kernel failed while running */

#ifndef POLYCOMP_FAIL
#define POLYCOMP_FAIL(status) return (status)
#endif

#include <cfloat>
#include <climits>
#include <cmath>
#include <cstddef>
#include <cstdint>

#ifdef __CUDACC__
/* ------------------------------------------------------------------ real CUDA */
#include <cuda_runtime.h>

#define POLYCOMP_EMULATED 0

#define POLYCOMP_LAUNCH(kernel, grid, block, ...) kernel<<<(grid), (block)>>>(__VA_ARGS__)

/* a launch with a bad configuration (e.g. more than 1024 threads per block) does not
 * run; cudaGetLastError reports it, and clears it */
#define POLYCOMP_LAUNCH_CHECK()                                                        \
    do {                                                                               \
        if (cudaGetLastError() != cudaSuccess) POLYCOMP_FAIL(POLYCOMP_STATUS_CUDA_LAUNCH); \
    } while (0)

#define POLYCOMP_ALLOC(ptr, bytes)                                                     \
    do {                                                                               \
        if (cudaMalloc((void **)&(ptr), (bytes)) != cudaSuccess)                        \
            POLYCOMP_FAIL(POLYCOMP_STATUS_CUDA_ALLOC);                                  \
    } while (0)

#define POLYCOMP_COPY_IN(dev, host, bytes)                                             \
    do {                                                                               \
        if (cudaMemcpy((dev), (host), (bytes), cudaMemcpyHostToDevice) != cudaSuccess)  \
            POLYCOMP_FAIL(POLYCOMP_STATUS_CUDA_COPY);                                   \
    } while (0)

#define POLYCOMP_COPY_OUT(host, dev, bytes)                                            \
    do {                                                                               \
        if (cudaMemcpy((host), (dev), (bytes), cudaMemcpyDeviceToHost) != cudaSuccess)  \
            POLYCOMP_FAIL(POLYCOMP_STATUS_CUDA_COPY);                                   \
    } while (0)

#define POLYCOMP_FREE(ptr)                                                             \
    do {                                                                               \
        cudaError_t polycomp_free_error_ = cudaFree(ptr);                              \
        (ptr) = nullptr;                                                               \
        if (polycomp_free_error_ != cudaSuccess) POLYCOMP_FAIL(POLYCOMP_STATUS_CUDA_FREE); \
    } while (0)

#define POLYCOMP_SYNC()                                                                \
    do {                                                                               \
        if (cudaDeviceSynchronize() != cudaSuccess) POLYCOMP_FAIL(POLYCOMP_STATUS_CUDA_SYNC); \
    } while (0)

#define POLYCOMP_MAX_DEVICES 64
#define POLYCOMP_STATUS_WORD(ptr)                                                      \
    do {                                                                               \
        static thread_local int *polycomp_words_[POLYCOMP_MAX_DEVICES];                \
        int polycomp_device_ = -1;                                                     \
        if (cudaGetDevice(&polycomp_device_) != cudaSuccess || polycomp_device_ < 0 ||  \
            polycomp_device_ >= POLYCOMP_MAX_DEVICES)                                  \
            POLYCOMP_FAIL(POLYCOMP_STATUS_CUDA_ALLOC);                                  \
        if (polycomp_words_[polycomp_device_] == nullptr &&                            \
            cudaMalloc((void **)&polycomp_words_[polycomp_device_], sizeof(int)) != cudaSuccess) \
            POLYCOMP_FAIL(POLYCOMP_STATUS_CUDA_ALLOC);                                  \
        (ptr) = polycomp_words_[polycomp_device_];                                     \
        if (cudaMemset((ptr), 0, sizeof(int)) != cudaSuccess)                          \
            POLYCOMP_FAIL(POLYCOMP_STATUS_CUDA_COPY);                                   \
    } while (0)

#else
/* ------------------------------------------------------------- CPU emulation
 *
 * One launch runs its blocks one at a time, in order (x fastest, then y, then z), each
 * on blockDim.x*y*z threads of its own, each thread with its own threadIdx. Because
 * only one block runs at a time, a `__shared__` array is a plain `static`: the one copy
 * serves the running block. Launches in a process run one at a time (a mutex) for the
 * same reason: two concurrent launches of one kernel would share its statics.
 *
 * __syncthreads() is a barrier over the running block's threads. A thread that returns
 * from the kernel counts as arrived at every later barrier of its block, so an early
 * `return` (a guard on the domain's edge) never hangs the threads still running. As in
 * CUDA, a __syncthreads() that only some threads reach (divergent code) is undefined:
 * the emulation pairs the threads' barriers by count and never hangs on them, but the
 * results of such a kernel mean nothing.
 *
 * The block's threads are one of two kinds:
 *
 * - fibers (the default): ucontext coroutines on the launching thread, run in order
 *   0, 1, ... each up to its next barrier (or its end), then again from the first. A
 *   barrier is a switch, not a wake-up of hundreds of OS threads: two orders of
 *   magnitude faster on a small machine, and deterministic. Each fiber has a
 *   POLYCOMP_EMULATION_STACK-byte stack (256 KiB unless defined; a guard page below).
 * - OS threads (under ThreadSanitizer, or when POLYCOMP_EMULATION_THREADS is defined):
 *   std::threads started for the launch, meeting at a barrier made of a mutex and a
 *   condition variable, not std::barrier: ThreadSanitizer understands pthread mutexes
 *   exactly, so a barrier that is there orders the threads' accesses for it, and one
 *   that is missing leaves a race it reports (it would see fibers as one thread).
 */
#if defined(__SANITIZE_THREAD__) && !defined(POLYCOMP_EMULATION_THREADS)
#define POLYCOMP_EMULATION_THREADS 1
#endif
#if defined(__has_feature)
#if __has_feature(thread_sanitizer) && !defined(POLYCOMP_EMULATION_THREADS)
#define POLYCOMP_EMULATION_THREADS 1
#endif
#endif
#ifndef POLYCOMP_EMULATION_STACK
#define POLYCOMP_EMULATION_STACK (256 * 1024)
#endif

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <type_traits>
#include <vector>
#ifdef POLYCOMP_EMULATION_THREADS
#include <condition_variable>
#include <thread>
#else
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>
#endif

#define POLYCOMP_EMULATED 1

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
/* g++ knows __restrict__ itself. Shared memory: see above. */
#define __shared__ static

struct uint3 {
    unsigned int x, y, z;
};

struct dim3 {
    unsigned int x, y, z;
    constexpr dim3(unsigned int x_ = 1, unsigned int y_ = 1, unsigned int z_ = 1)
        : x(x_), y(y_), z(z_) {}
};

/* gridDim, blockDim and blockIdx are written by the launching thread while the block's
 * threads wait (before they start, or between two blocks). */
inline dim3 gridDim;
inline dim3 blockDim;
inline uint3 blockIdx;
inline thread_local uint3 threadIdx;

namespace polycomp_emu {

inline std::mutex &launch_mutex() {
    static std::mutex mutex;
    return mutex;
}

/* CUDA's limits on a launch's configuration */
inline bool valid_launch(dim3 grid, dim3 block) {
    unsigned long long threads = 1ULL * block.x * block.y * block.z;
    return threads >= 1 && threads <= 1024 && block.z <= 64 && grid.x >= 1 &&
           grid.x <= 2147483647u && grid.y >= 1 && grid.y <= 65535 && grid.z >= 1 &&
           grid.z <= 65535;
}

inline uint3 thread_index(unsigned int t, dim3 block) {
    return uint3{t % block.x, t / block.x % block.y, t / (block.x * block.y)};
}

#ifdef POLYCOMP_EMULATION_THREADS
/* A reusable barrier for a changing number of threads. */
class Barrier {
  public:
    explicit Barrier(unsigned int count) : expected_(count) {}

    /* Back to `count` threads; only while no thread is inside. */
    void reset(unsigned int count) {
        std::lock_guard<std::mutex> lock(mutex_);
        expected_ = count;
        arrived_ = 0;
    }

    void arrive_and_wait() {
        std::unique_lock<std::mutex> lock(mutex_);
        unsigned long phase = phase_;
        if (++arrived_ >= expected_)
            next_phase();
        else
            changed_.wait(lock, [&] { return phase_ != phase; });
    }

    /* The calling thread leaves: this phase and every later one wait for one thread
     * less. */
    void arrive_and_drop() {
        std::lock_guard<std::mutex> lock(mutex_);
        --expected_;
        if (arrived_ >= expected_) next_phase();
    }

  private:
    void next_phase() {
        arrived_ = 0;
        ++phase_;
        changed_.notify_all();
    }

    std::mutex mutex_;
    std::condition_variable changed_;
    unsigned int expected_;
    unsigned int arrived_ = 0;
    unsigned long phase_ = 0;
};

/* the running block's barrier (__syncthreads) */
inline Barrier *block_barrier = nullptr;

inline void sync_block() { block_barrier->arrive_and_wait(); }

template <class Body>
int run_grid(dim3 grid, dim3 block, const Body &body) {
    const unsigned int threads = block.x * block.y * block.z;
    Barrier block_sync(threads);
    block_barrier = &block_sync;
    /* `edge`: the launching thread and the block's threads meet there before and after
     * each block; `done` (read after an edge) tells them the grid is finished. */
    Barrier edge(threads + 1);
    bool done = false;
    auto worker = [&](unsigned int t) {
        threadIdx = thread_index(t, block);
        for (;;) {
            edge.arrive_and_wait();
            if (done) return;
            body();
            block_sync.arrive_and_drop(); /* returned: arrived at every later barrier */
            edge.arrive_and_wait();
        }
    };
    std::vector<std::thread> team;
    team.reserve(threads);
    bool started = true;
    try {
        for (unsigned int t = 0; t < threads; ++t) team.emplace_back(worker, t);
    } catch (...) { /* std::system_error: no more threads */
        started = false;
    }
    if (!started) {
        done = true;
        for (std::size_t missing = team.size(); missing < threads; ++missing)
            edge.arrive_and_drop();
    } else {
        for (unsigned int z = 0; z < grid.z; ++z)
            for (unsigned int y = 0; y < grid.y; ++y)
                for (unsigned int x = 0; x < grid.x; ++x) {
                    blockIdx = uint3{x, y, z};
                    block_sync.reset(threads);
                    edge.arrive_and_wait(); /* the block starts */
                    edge.arrive_and_wait(); /* every thread has finished it */
                }
        done = true;
    }
    edge.arrive_and_wait();
    for (std::thread &thread : team) thread.join();
    block_barrier = nullptr;
    return started ? 0 : POLYCOMP_STATUS_CUDA_LAUNCH;
}

#else
/* The running block's fibers; `current` is the one running. */
struct Fibers {
    enum State : unsigned char { READY, WAITING, DONE };
    ucontext_t scheduler;
    std::vector<ucontext_t> contexts;
    std::vector<State> state;
    unsigned int current = 0;
    void (*call)(const void *) = nullptr; /* calls the kernel body */
    const void *body = nullptr;
};
inline Fibers *fibers = nullptr;

inline void fiber_main() {
    Fibers &f = *fibers;
    f.call(f.body);
    f.state[f.current] = Fibers::DONE; /* returning resumes the scheduler (uc_link) */
}

/* getcontext returns twice, as setjmp does: in a function of its own it leaves the
 * caller's loop variables alone (-Wclobbered) */
[[gnu::noinline]] inline void fresh_context(ucontext_t *context) { getcontext(context); }

/* __syncthreads: back to the scheduler until every fiber still running is here */
inline void sync_block() {
    Fibers &f = *fibers;
    f.state[f.current] = Fibers::WAITING;
    swapcontext(&f.contexts[f.current], &f.scheduler);
}

template <class Body>
int run_grid(dim3 grid, dim3 block, const Body &body) {
    const unsigned int threads = block.x * block.y * block.z;
    const std::size_t page = sysconf(_SC_PAGESIZE);
    const std::size_t stack = (POLYCOMP_EMULATION_STACK + page - 1) / page * page;
    const std::size_t span = page + stack; /* a guard page below each stack */
    void *memory = mmap(nullptr, span * threads, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (memory == MAP_FAILED) return POLYCOMP_STATUS_CUDA_LAUNCH;
    char *stacks = static_cast<char *>(memory);
    for (unsigned int t = 0; t < threads; ++t) mprotect(stacks + t * span, page, PROT_NONE);
    Fibers f;
    f.contexts.resize(threads);
    f.state.resize(threads);
    f.call = [](const void *b) { (*static_cast<const Body *>(b))(); };
    f.body = &body;
    fibers = &f;
    for (unsigned int z = 0; z < grid.z; ++z)
        for (unsigned int y = 0; y < grid.y; ++y)
            for (unsigned int x = 0; x < grid.x; ++x) {
                blockIdx = uint3{x, y, z};
                for (unsigned int t = 0; t < threads; ++t) {
                    ucontext_t &context = f.contexts[t];
                    fresh_context(&context);
                    context.uc_stack.ss_sp = stacks + t * span + page;
                    context.uc_stack.ss_size = stack;
                    context.uc_link = &f.scheduler;
                    makecontext(&context, fiber_main, 0);
                    f.state[t] = Fibers::READY;
                }
                /* rounds: every ready fiber runs to its next barrier or its end; a
                 * round in which none is left running ends the block */
                for (unsigned int running = threads; running > 0;) {
                    for (unsigned int t = 0; t < threads; ++t) {
                        if (f.state[t] != Fibers::READY) continue;
                        f.current = t;
                        threadIdx = thread_index(t, block);
                        swapcontext(&f.scheduler, &f.contexts[t]);
                        if (f.state[t] == Fibers::DONE) --running;
                    }
                    for (Fibers::State &state : f.state)
                        if (state == Fibers::WAITING) state = Fibers::READY;
                }
            }
    fibers = nullptr;
    munmap(memory, span * threads);
    return 0;
}
#endif

/* Runs `body` (the kernel call) on every thread of every block of the grid; 0, or
 * POLYCOMP_STATUS_CUDA_LAUNCH when the configuration is out of CUDA's range or the
 * threads cannot be made (then nothing ran). */
template <class Body>
int launch(dim3 grid, dim3 block, const Body &body) {
    if (!valid_launch(grid, block)) return POLYCOMP_STATUS_CUDA_LAUNCH;
    std::lock_guard<std::mutex> serial(launch_mutex());
    gridDim = grid;
    blockDim = block;
    return run_grid(grid, block, body);
}

} // namespace polycomp_emu

inline void __syncthreads() { polycomp_emu::sync_block(); }

/* Atomics (CUDA's are relaxed: they order nothing but themselves). */
template <class T>
inline T polycomp_atomic_add(T *address, T value) {
    if constexpr (std::is_floating_point_v<T>) {
        /* no fetch-add on floating point: compare and swap until no other thread came
         * in between */
        T old;
        __atomic_load(address, &old, __ATOMIC_RELAXED);
        T sum = old + value;
        while (!__atomic_compare_exchange(address, &old, &sum, true, __ATOMIC_RELAXED,
                                          __ATOMIC_RELAXED))
            sum = old + value;
        return old;
    } else {
        return __atomic_fetch_add(address, value, __ATOMIC_RELAXED);
    }
}
inline int atomicAdd(int *a, int v) { return polycomp_atomic_add(a, v); }
inline unsigned int atomicAdd(unsigned int *a, unsigned int v) { return polycomp_atomic_add(a, v); }
inline long long atomicAdd(long long *a, long long v) { return polycomp_atomic_add(a, v); }
inline unsigned long long atomicAdd(unsigned long long *a, unsigned long long v) {
    return polycomp_atomic_add(a, v);
}
inline float atomicAdd(float *a, float v) { return polycomp_atomic_add(a, v); }
inline double atomicAdd(double *a, double v) { return polycomp_atomic_add(a, v); }

template <class T>
inline T polycomp_atomic_extreme(T *address, T value, bool maximum) {
    T old = __atomic_load_n(address, __ATOMIC_RELAXED);
    while ((maximum ? old < value : value < old) &&
           !__atomic_compare_exchange_n(address, &old, value, true, __ATOMIC_RELAXED,
                                        __ATOMIC_RELAXED)) {
    }
    return old;
}
/* atomicMax and atomicMin for int, unsigned int, long long, unsigned long long */
#define POLYCOMP_ATOMIC_BOUNDS(T)                                                      \
    inline T atomicMax(T *a, T v) { return polycomp_atomic_extreme(a, v, true); }      \
    inline T atomicMin(T *a, T v) { return polycomp_atomic_extreme(a, v, false); }
POLYCOMP_ATOMIC_BOUNDS(int)
POLYCOMP_ATOMIC_BOUNDS(unsigned int)
POLYCOMP_ATOMIC_BOUNDS(long long)
POLYCOMP_ATOMIC_BOUNDS(unsigned long long)
#undef POLYCOMP_ATOMIC_BOUNDS

inline int atomicExch(int *a, int v) { return __atomic_exchange_n(a, v, __ATOMIC_RELAXED); }
inline int atomicCAS(int *a, int compare, int v) {
    __atomic_compare_exchange_n(a, &compare, v, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
    return compare; /* the old value, as CUDA's */
}

/* CUDA's min and max for any two arithmetic types: the common type, and fmin/fmax
 * (NaN-ignoring) for floating point, as CUDA maps them. */
template <class A, class B,
          class = std::enable_if_t<std::is_arithmetic_v<A> && std::is_arithmetic_v<B>>>
inline std::common_type_t<A, B> min(A a, B b) {
    using T = std::common_type_t<A, B>;
    if constexpr (std::is_floating_point_v<T>)
        return std::fmin(T(a), T(b));
    else
        return T(b) < T(a) ? T(b) : T(a);
}
template <class A, class B,
          class = std::enable_if_t<std::is_arithmetic_v<A> && std::is_arithmetic_v<B>>>
inline std::common_type_t<A, B> max(A a, B b) {
    using T = std::common_type_t<A, B>;
    if constexpr (std::is_floating_point_v<T>)
        return std::fmax(T(a), T(b));
    else
        return T(a) < T(b) ? T(b) : T(a);
}

/* Host macros: device memory is host memory. */
#define POLYCOMP_LAUNCH(kernel, grid, block, ...)                                      \
    do {                                                                               \
        if (polycomp_emu::launch((grid), (block), [&] { kernel(__VA_ARGS__); }) != 0)   \
            POLYCOMP_FAIL(POLYCOMP_STATUS_CUDA_LAUNCH);                                 \
    } while (0)

/* a refused launch already failed in POLYCOMP_LAUNCH */
#define POLYCOMP_LAUNCH_CHECK() \
    do {                        \
    } while (0)

/* malloc(0) may be a null pointer, which would read as a failure */
#define POLYCOMP_ALLOC(ptr, bytes)                                                     \
    do {                                                                               \
        std::size_t polycomp_bytes_ = (bytes);                                         \
        (ptr) = static_cast<std::remove_reference_t<decltype(ptr)>>(                   \
            std::malloc(polycomp_bytes_ ? polycomp_bytes_ : 1));                       \
        if ((ptr) == nullptr) POLYCOMP_FAIL(POLYCOMP_STATUS_CUDA_ALLOC);               \
    } while (0)

#define POLYCOMP_COPY_IN(dev, host, bytes)                                             \
    do {                                                                               \
        std::size_t polycomp_bytes_ = (bytes);                                         \
        if (polycomp_bytes_) std::memcpy((dev), (host), polycomp_bytes_);              \
    } while (0)

#define POLYCOMP_COPY_OUT(host, dev, bytes) POLYCOMP_COPY_IN(host, dev, bytes)

#define POLYCOMP_FREE(ptr)                                                             \
    do {                                                                               \
        std::free(ptr);                                                                \
        (ptr) = nullptr;                                                               \
    } while (0)

/* a launch returns when its grid has finished */
#define POLYCOMP_SYNC() \
    do {                \
    } while (0)

#define POLYCOMP_STATUS_WORD(ptr)                  \
    do {                                           \
        static thread_local int polycomp_word_;    \
        polycomp_word_ = 0;                        \
        (ptr) = &polycomp_word_;                   \
    } while (0)

#endif /* __CUDACC__ */
#endif /* POLYCOMP_CUDA_H */
