// Module-scope __device__ variables (initialised scalars and an array, a counter written with
// atomics) and a __noinline__ device function, so the PTX has .global variables, a .func and a
// call with .param arguments and a return value.
__device__ float g_scale = 1.5f;
__device__ float g_table[4] = {0.5f, 1.0f, 2.0f, -4.0f};
__device__ unsigned g_calls;

__device__ __noinline__ float poly(float x, float a, int k) {
    atomicAdd(&g_calls, 1u);
    return (x * a + g_table[k & 3]) * x;
}

extern "C" __global__ void scale_poly(const float* x, float* y, unsigned* calls, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = poly(x[i], g_scale, i);
    __syncthreads();
    if (threadIdx.x == 0) calls[0] = g_calls;
}
