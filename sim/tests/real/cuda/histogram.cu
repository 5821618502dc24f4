// Histogram with warp aggregation: lanes holding the same bin find each other with
// __match_any_sync and only the lowest of them adds the group's count to the shared histogram.
// Every lane runs the same number of rounds (out-of-range lanes carry a sentinel bin), so the
// full mask is always right.
extern "C" __global__ void histogram_match_any(const unsigned* keys, unsigned* hist, int n, int bins) {
    extern __shared__ unsigned local_hist[];
    for (int b = threadIdx.x; b < bins; b += blockDim.x) local_hist[b] = 0;
    __syncthreads();
    const unsigned none = 0xffffffffu;
    int stride = gridDim.x * blockDim.x;
    int rounds = (n + stride - 1) / stride;
    int lane = threadIdx.x & 31;
    for (int r = 0; r < rounds; ++r) {
        int i = r * stride + blockIdx.x * blockDim.x + threadIdx.x;
        unsigned bin = i < n ? keys[i] % (unsigned)bins : none;
        unsigned peers = __match_any_sync(0xffffffffu, bin);
        int leader = __ffs(peers) - 1;
        if (bin != none && lane == leader) atomicAdd(&local_hist[bin], (unsigned)__popc(peers));
    }
    __syncthreads();
    for (int b = threadIdx.x; b < bins; b += blockDim.x)
        if (local_hist[b] != 0) atomicAdd(&hist[b], local_hist[b]);
}
