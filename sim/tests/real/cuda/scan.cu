// Inclusive scan of each block's slice: a shfl_up scan inside each warp, a scan of the warp
// totals by warp 0 through shared memory, then every warp adds the totals of the warps before it.
extern "C" __global__ void scan_inclusive_i32(const int* x, int* y, int n) {
    __shared__ int warp_total[32];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int lane = threadIdx.x & 31;
    int warp = threadIdx.x >> 5;
    int v = i < n ? x[i] : 0;
    for (int o = 1; o < 32; o <<= 1) {
        int t = __shfl_up_sync(0xffffffffu, v, o);
        if (lane >= o) v += t;
    }
    if (lane == 31) warp_total[warp] = v;
    __syncthreads();
    if (warp == 0) {
        int warps = blockDim.x >> 5;
        int t = lane < warps ? warp_total[lane] : 0;
        for (int o = 1; o < 32; o <<= 1) {
            int u = __shfl_up_sync(0xffffffffu, t, o);
            if (lane >= o) t += u;
        }
        if (lane < warps) warp_total[lane] = t;
    }
    __syncthreads();
    if (warp > 0) v += warp_total[warp - 1];
    if (i < n) y[i] = v;
}
