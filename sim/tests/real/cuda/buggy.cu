// Deliberately wrong kernels: each one must be reported by the named check.

// memcheck: thread i reads x[i + 1], so the last thread reads one element past the buffer.
extern "C" __global__ void bug_out_of_bounds(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i + 1] - x[i];
}

// racecheck: neighbours' shared slots are read with no barrier after they are written.
extern "C" __global__ void bug_shared_race(const float* x, float* y) {
    __shared__ float s[128];
    int t = threadIdx.x;
    s[t] = x[t];
    y[t] = s[(t + 1) % 128] + s[t];
}

// racecheck: a tree reduction whose __syncthreads() between steps was left out.
extern "C" __global__ void bug_missing_syncthreads(const float* x, float* out) {
    __shared__ float s[256];
    int t = threadIdx.x;
    s[t] = x[blockIdx.x * 256 + t];
    __syncthreads();
    for (int stride = 128; stride > 0; stride >>= 1) {
        if (t < stride) s[t] += s[t + stride];
    }
    if (t == 0) out[blockIdx.x] = s[0];
}

// synccheck: half of the block waits at a barrier the other half skips; the two halves then
// meet at different barrier instructions.
extern "C" __global__ void bug_divergent_barrier(const float* x, float* y) {
    __shared__ float s[64];
    int t = threadIdx.x;
    s[t] = x[t];
    if (t < 32) __syncthreads();
    __syncthreads();
    y[t] = s[63 - t];
}

// synccheck: half of the block waits at a barrier while the other half exits.
extern "C" __global__ void bug_exit_before_barrier(const float* x, float* y) {
    __shared__ float s[64];
    int t = threadIdx.x;
    s[t] = x[t];
    if (t < 32) __syncthreads();
    y[t] = s[t];
}

// initcheck: reads a workspace nobody wrote.
extern "C" __global__ void bug_uninitialized_read(const float* workspace, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = workspace[i] * 2.0f;
}

// memcheck: a float load through a pointer one byte past an aligned address.
extern "C" __global__ void bug_misaligned(const char* bytes, float* y) {
    int t = threadIdx.x;
    y[t] = *reinterpret_cast<const float*>(bytes + 4 * t + 1);
}

// synccheck: a full-mask shuffle executed by half of the warp while the other half waits at a
// barrier.
extern "C" __global__ void bug_shfl_divergent(const float* x, float* y) {
    int t = threadIdx.x;
    float v = x[t];
    // Lanes 16..31 wait at the barrier while lanes 0..15 wait for them in the shuffle. (Had
    // they exited instead, the shuffle would be legal: exited lanes are not waited for.)
    if (t < 16) v += __shfl_xor_sync(0xffffffffu, v, 1);
    __syncthreads();
    y[t] = v;
}
