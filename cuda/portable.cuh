// portable.cuh -- what differs between the CUDA and the host (plain C++) build of cuda/:
// integer types, thread indices, atomics, and the kernel wrapper macro CEP_KERNEL.
//
// * nvcc / NVRTC (__CUDACC__): CEP_KERNEL(name, (params), (args)) defines
//   `extern "C" __global__ void name(params)` whose body is the given call.
// * g++ (kernels/host.py): CEP_KERNEL defines `extern "C" void name(grid, block, params)` that runs
//   every thread of every block, one after the other, with threadIdx/blockIdx set as on a device.
// No standard header is used (NVRTC ships none), so the integer types are our own.
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
// Set by the grid runner before each "thread" runs; thread_local so that the host build stays
// correct should a caller ever run two launches from two threads.
static thread_local cep_dim3 threadIdx, blockIdx, blockDim, gridDim;

CEP_DEVICE cep_i64 cep_thread_id() { return (cep_i64)blockIdx.x * blockDim.x + threadIdx.x; }
CEP_DEVICE cep_i64 cep_thread_count() { return (cep_i64)gridDim.x * blockDim.x; }

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
// The host "launch": every block, every thread, one after the other. Kernels never synchronise
// within a block (no shared memory, no __syncthreads), so this order is a legal schedule.
#define CEP_KERNEL(name, PARAMS, CALL)                                                     \
    extern "C" void name(unsigned cep_grid, unsigned cep_block, CEP_UNPAREN PARAMS) {      \
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

#endif

#endif  // CEP_PORTABLE_CUH
