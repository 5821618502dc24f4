// Block reductions with cooperative groups: each 32-thread tile reduces with cg::reduce, the first
// tile combines the per-tile partials. One output per block (no cross-block atomics, so the
// result is deterministic). This int version lowers to redux.sync on sm_80 (the float one, in
// cg_reduce_f32.cu, to shuffles); the headers also bring module-scope .global variables from libcu++.
#include "cg_block_reduce.cuh"

extern "C" __global__ void cg_block_sum_i32(const int* x, int* out, int n) {
    __shared__ int partial[32];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int s = block_reduce(i < n ? x[i] : 0, 0, cg::plus<int>(), partial);
    if (threadIdx.x == 0) out[blockIdx.x] = s;
}
