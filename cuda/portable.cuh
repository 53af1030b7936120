// portable.cuh -- what differs between the CUDA and the host (plain C++) build of cuda/:
// integer types, thread indices, atomics, and the kernel wrapper macro CEP_KERNEL.
//
// * nvcc / NVRTC (__CUDACC__): CEP_KERNEL(name, (params), (args)) defines
//   `extern "C" __global__ void name(params)` whose body is the given call.
// * g++ (kernels/host.py): CEP_KERNEL defines `extern "C" void name(grid, block, seed, params)`
//   that runs every thread of every block with threadIdx/blockIdx set as on a device:
//   - serial build (default): one thread after the other, in index order (`seed` unused);
//   - concurrent build (-DCEP_HOST_CONCURRENT -pthread): the threads of a launch run on several
//     std::threads at the same time, one per group of CEP_HOST_GROUP consecutive threads of a
//     block (a whole block when 0), each group in an order shuffled from `seed`; built with
//     -fsanitize=thread too, this is how the tests look for data races between kernel threads.
// The device part uses no standard header (NVRTC ships none), so the integer types are our own.
#ifndef CEP_PORTABLE_CUH
#define CEP_PORTABLE_CUH

typedef long long cep_i64;
typedef unsigned long long cep_u64;
typedef int cep_i32;
typedef unsigned char cep_u8;

#define CEP_MAX_STEPS 64
#define CEP_I64_MAX 9223372036854775807LL

// ---------------------------------------------------------------------------------------------
// Portability: thread indices and atomics.
#if defined(__CUDACC__)

#define CEP_DEVICE __device__ __forceinline__
#define CEP_ON_DEVICE 1

CEP_DEVICE cep_i64 cep_thread_id() { return (cep_i64)blockIdx.x * blockDim.x + threadIdx.x; }
CEP_DEVICE cep_i64 cep_thread_count() { return (cep_i64)gridDim.x * blockDim.x; }

// Returns the old value, like CUDA's atomicAdd.
CEP_DEVICE cep_u64 cep_atomic_add(cep_u64* p, cep_u64 v) { return atomicAdd(p, v); }
// 64-bit signed atomicMax/atomicMin exist from compute capability 3.5 (we target >= 8.0).
CEP_DEVICE void cep_atomic_max(cep_i64* p, cep_i64 v) { atomicMax(p, v); }
CEP_DEVICE void cep_atomic_min(cep_i64* p, cep_i64 v) { atomicMin(p, v); }
CEP_DEVICE double cep_nan() { return __longlong_as_double(0x7ff8000000000000LL); }
CEP_DEVICE double cep_inf() { return __longlong_as_double(0x7ff0000000000000LL); }

// Kernel wrappers: CEP_KERNEL(name, (params), (body call)) defines `extern "C" __global__ name`;
// the host build defines a serial grid runner with the same parameters after (grid, block).
#define CEP_UNPAREN(...) __VA_ARGS__
#define CEP_KERNEL(name, PARAMS, CALL) \
    extern "C" __global__ void name(CEP_UNPAREN PARAMS) { CALL; }

#else  // ------------------------------------------------------------------ host build (C++17)

#define CEP_DEVICE static inline
#define CEP_ON_DEVICE 0

struct cep_dim3 {
    unsigned x, y, z;
};
// Set by the grid runner before each "thread" runs. thread_local: in the concurrent build every
// std::thread runs kernel threads of its own block.
static thread_local cep_dim3 threadIdx, blockIdx, blockDim, gridDim;

CEP_DEVICE cep_i64 cep_thread_id() { return (cep_i64)blockIdx.x * blockDim.x + threadIdx.x; }
CEP_DEVICE cep_i64 cep_thread_count() { return (cep_i64)gridDim.x * blockDim.x; }

// CUDA's atomicAdd/atomicMax/atomicMin are relaxed read-modify-writes (no ordering of other
// memory accesses, PTX `atom.relaxed.gpu`): the host maps them to relaxed GCC atomics, never to
// anything stronger, so that code which relied on an ordering CUDA does not give would race here
// too (and ThreadSanitizer would say so).
CEP_DEVICE cep_u64 cep_atomic_add(cep_u64* p, cep_u64 v) {
    return __atomic_fetch_add(p, v, __ATOMIC_RELAXED);
}
CEP_DEVICE void cep_atomic_max(cep_i64* p, cep_i64 v) {
    cep_i64 old = __atomic_load_n(p, __ATOMIC_RELAXED);
    while (old < v && !__atomic_compare_exchange_n(p, &old, v, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    }
}
CEP_DEVICE void cep_atomic_min(cep_i64* p, cep_i64 v) {
    cep_i64 old = __atomic_load_n(p, __ATOMIC_RELAXED);
    while (old > v && !__atomic_compare_exchange_n(p, &old, v, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    }
}
CEP_DEVICE double cep_nan() { return __builtin_nan(""); }
CEP_DEVICE double cep_inf() { return __builtin_inf(); }

#define CEP_UNPAREN(...) __VA_ARGS__

#if defined(CEP_HOST_CONCURRENT)  // ------------------------------ concurrent host build
#include <thread>
#include <vector>

#ifndef CEP_HOST_GROUP
#define CEP_HOST_GROUP 0
#endif

// splitmix64: the seeded shuffles (a launch with the same seed runs its groups in the same orders).
static inline cep_u64 cep_mix(cep_u64 x) {
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

// Runs body() once per kernel thread: one std::thread per group of consecutive threads of a block,
// all started together (a gate, so that they overlap rather than run one after the other as they
// are created), each group in a shuffled order. Kernels never synchronise inside a block (no
// shared memory, no __syncthreads), so any interleaving of their threads is a legal schedule.
template <class F>
static void cep_run_grid(unsigned grid, unsigned block, cep_u64 seed, const F& body) {
    unsigned group = (CEP_HOST_GROUP == 0 || CEP_HOST_GROUP > block) ? block : CEP_HOST_GROUP;
    unsigned per_block = (block + group - 1) / group;
    int gate = 0;
    std::vector<std::thread> workers;
    workers.reserve((size_t)grid * per_block);
    for (unsigned b = 0; b < grid; ++b) {
        for (unsigned g = 0; g < per_block; ++g) {
            workers.emplace_back([=, &gate, &body]() {
                gridDim = cep_dim3{grid, 1, 1};
                blockDim = cep_dim3{block, 1, 1};
                blockIdx = cep_dim3{b, 0, 0};
                unsigned first = g * group;
                unsigned n = (first + group > block ? block : first + group) - first;
                std::vector<unsigned> order(n);
                for (unsigned i = 0; i < n; ++i) order[i] = first + i;
                cep_u64 r = cep_mix(seed ^ cep_mix(((cep_u64)b << 32) | g));
                for (unsigned i = n; i > 1; --i) {  // Fisher-Yates
                    r = cep_mix(r);
                    unsigned j = (unsigned)(r % i);
                    unsigned t = order[i - 1]; order[i - 1] = order[j]; order[j] = t;
                }
                while (!__atomic_load_n(&gate, __ATOMIC_ACQUIRE)) std::this_thread::yield();
                for (unsigned i = 0; i < n; ++i) {
                    threadIdx = cep_dim3{order[i], 0, 0};
                    body();
                }
            });
        }
    }
    __atomic_store_n(&gate, 1, __ATOMIC_RELEASE);
    // joining orders every kernel write before the caller's reads, as the stream synchronisation
    // before a device-to-host copy does on a GPU
    for (std::thread& w : workers) w.join();
}

#define CEP_KERNEL(name, PARAMS, CALL)                                                          \
    extern "C" void name(unsigned cep_grid, unsigned cep_block, cep_u64 cep_seed, CEP_UNPAREN PARAMS) { \
        cep_run_grid(cep_grid, cep_block, cep_seed, [&]() { CALL; });                           \
    }

#else  // ---------------------------------------------------------- serial host build

// The host "launch": every block, every thread, one after the other. Kernels never synchronise
// within a block (no shared memory, no __syncthreads), so this order is a legal schedule.
#define CEP_KERNEL(name, PARAMS, CALL)                                                     \
    extern "C" void name(unsigned cep_grid, unsigned cep_block, cep_u64 cep_seed, CEP_UNPAREN PARAMS) { \
        (void)cep_seed;                                                                    \
        gridDim = cep_dim3{cep_grid, 1, 1};                                                \
        blockDim = cep_dim3{cep_block, 1, 1};                                              \
        for (unsigned b = 0; b < cep_grid; ++b) {                                          \
            for (unsigned t = 0; t < cep_block; ++t) {                                     \
                blockIdx = cep_dim3{b, 0, 0};                                              \
                threadIdx = cep_dim3{t, 0, 0};                                             \
                CALL;                                                                      \
            }                                                                              \
        }                                                                                  \
    }

#endif  // CEP_HOST_CONCURRENT

#endif

#endif  // CEP_PORTABLE_CUH
