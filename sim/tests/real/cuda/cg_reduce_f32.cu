// Block reductions with cooperative groups: each 32-thread tile reduces with cg::reduce, the first
// tile combines the per-tile partials. One output per block (no cross-block atomics, so the
// result is deterministic). This float version lowers to shuffles (the int one, in
// cg_reduce_i32.cu, to redux.sync); the headers also bring module-scope .global variables from libcu++.
#include "cg_block_reduce.cuh"

extern "C" __global__ void cg_block_sum_f32(const float* x, float* out, int n) {
    __shared__ float partial[32];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float s = block_reduce(i < n ? x[i] : 0.0f, 0.0f, cg::plus<float>(), partial);
    if (threadIdx.x == 0) out[blockIdx.x] = s;
}

extern "C" __global__ void cg_block_max_f32(const float* x, float* out, int n) {
    __shared__ float partial[32];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float s = block_reduce(i < n ? x[i] : __int_as_float(0xff800000), __int_as_float(0xff800000), cg::greater<float>(), partial);
    if (threadIdx.x == 0) out[blockIdx.x] = s;
}
