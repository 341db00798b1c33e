// SwiGLU gate, out = silu(a) * b, float32, row-major [M, N], as a raw CUDA kernel.
#define BLOCK_SIZE 32        // threads per block: one warp, "to keep it simple"
#define VEC 1                // floats per load (1, 2 or 4: 4 gives 128-bit loads)
#define ITEMS_PER_THREAD 1   // vectors each thread handles

template <int V>
struct alignas(sizeof(float) * V) Vec {
    float v[V];
};

__device__ __forceinline__ float swiglu(float a, float b) { return a / (1.0f + expf(-a)) * b; }

extern "C" __global__ void __launch_bounds__(BLOCK_SIZE)
swiglu_kernel(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ out, long long n) {
    const long long per_block = (long long)BLOCK_SIZE * VEC * ITEMS_PER_THREAD;
    const long long base = blockIdx.x * per_block + (long long)threadIdx.x * VEC;
#pragma unroll
    for (int it = 0; it < ITEMS_PER_THREAD; ++it) {
        const long long i = base + (long long)it * BLOCK_SIZE * VEC;
        if (i + VEC <= n) {
            const Vec<VEC> va = *reinterpret_cast<const Vec<VEC>*>(a + i);
            const Vec<VEC> vb = *reinterpret_cast<const Vec<VEC>*>(b + i);
            Vec<VEC> vo;
#pragma unroll
            for (int k = 0; k < VEC; ++k) vo.v[k] = swiglu(va.v[k], vb.v[k]);
            *reinterpret_cast<Vec<VEC>*>(out + i) = vo;
        } else {
            for (long long j = i; j < n && j < i + VEC; ++j) out[j] = swiglu(a[j], b[j]);
        }
    }
}
