// Row-wise layernorm and softmax, one block per row: warp reductions with __shfl_xor_sync,
// combined across warps through shared memory.
__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
// `is_max` selects the operation; `scratch` holds one value per warp.
__device__ float block_all_reduce(float v, bool is_max, float* scratch) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    v = is_max ? warp_max(v) : warp_sum(v);
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    if (warp == 0) {
        float identity = is_max ? __int_as_float(0xff800000) : 0.0f;
        float t = lane < warps ? scratch[lane] : identity;
        t = is_max ? warp_max(t) : warp_sum(t);
        if (lane == 0) scratch[0] = t;
    }
    __syncthreads();
    return scratch[0];
}

extern "C" __global__ void layernorm_f32(const float* x, const float* gamma, const float* beta,
                                         float* y, int cols, float eps) {
    __shared__ float scratch[32];
    const float* row = x + (size_t)blockIdx.x * cols;
    float s = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) s += row[c];
    float mean = block_all_reduce(s, false, scratch) / cols;
    float q = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
        float d = row[c] - mean;
        q += d * d;
    }
    float rstd = rsqrtf(block_all_reduce(q, false, scratch) / cols + eps);
    for (int c = threadIdx.x; c < cols; c += blockDim.x)
        y[(size_t)blockIdx.x * cols + c] = (row[c] - mean) * rstd * gamma[c] + beta[c];
}

extern "C" __global__ void softmax_f32(const float* x, float* y, int cols) {
    __shared__ float scratch[32];
    const float* row = x + (size_t)blockIdx.x * cols;
    float m = __int_as_float(0xff800000);
    for (int c = threadIdx.x; c < cols; c += blockDim.x) m = fmaxf(m, row[c]);
    m = block_all_reduce(m, true, scratch);
    float s = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) s += expf(row[c] - m);
    float inv = 1.0f / block_all_reduce(s, false, scratch);
    for (int c = threadIdx.x; c < cols; c += blockDim.x)
        y[(size_t)blockIdx.x * cols + c] = expf(row[c] - m) * inv;
}
