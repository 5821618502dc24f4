// Block-wide votes, warp-aggregated atomics and a cooperative-groups tile reduction in blocks
// whose last warp is partial.
#include <cooperative_groups.h>
namespace cg = cooperative_groups;

// Per block: how many x are positive, whether any exceeds 0.99, whether all lie above -0.99 and
// whether all are finite. __syncthreads_count/_or/_and compile to bar.red.{popc,or,and}.
// Threads past n vote neutrally (false for count/or, true for and).
extern "C" __global__ void block_vote(const float* x, unsigned* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    bool in = i < n;
    float v = in ? x[i] : 0.0f;
    int positive = __syncthreads_count(in && v > 0.0f);
    int any_big = __syncthreads_or(in && v > 0.99f);
    int all_above = __syncthreads_and(!in || v > -0.99f);
    int all_finite = __syncthreads_and(!in || isfinite(v));
    if (threadIdx.x == 0) {
        out[4 * blockIdx.x + 0] = positive;
        out[4 * blockIdx.x + 1] = any_big != 0;
        out[4 * blockIdx.x + 2] = all_above != 0;
        out[4 * blockIdx.x + 3] = all_finite != 0;
    }
}

// Counts x > 0.25 with one atomic per warp (the leader of the coalesced group adds its size),
// and gives each selected element its rank among the selected lanes of its warp (others get
// 0xffffffff).
extern "C" __global__ void warp_agg_count(const float* x, unsigned* count, unsigned* rank, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    unsigned r = 0xffffffffu;
    if (x[i] > 0.25f) {
        cg::coalesced_group g = cg::coalesced_threads();
        if (g.thread_rank() == 0) atomicAdd(count, g.num_threads());
        r = g.thread_rank();
    }
    rank[i] = r;
}

// Sum of a 32-thread tile whose lanes past the end of the block do not exist: the full-mask
// shuffles are legal there, and the values they return from missing lanes are not used.
__device__ float tile_sum(cg::thread_block_tile<32> tile, float v, unsigned present) {
    for (int offset = 16; offset > 0; offset /= 2) {
        float other = tile.shfl_down(v, offset);
        if (tile.thread_rank() + offset < present) v += other;
    }
    return v;
}

// One sum per block of 100 threads (three full warps and one of four threads).
extern "C" __global__ void tile_sum_partial(const float* x, float* out, int n) {
    __shared__ float partial[32];
    cg::thread_block block = cg::this_thread_block();
    cg::thread_block_tile<32> tile = cg::tiled_partition<32>(block);
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned first = tile.meta_group_rank() * 32;
    unsigned present = min(32u, block.size() - first);
    float s = tile_sum(tile, i < n ? x[i] : 0.0f, present);
    if (tile.thread_rank() == 0) partial[tile.meta_group_rank()] = s;
    block.sync();
    if (tile.meta_group_rank() == 0) {
        unsigned tiles = tile.meta_group_size();
        float w = tile.thread_rank() < tiles ? partial[tile.thread_rank()] : 0.0f;
        w = tile_sum(tile, w, tiles);
        if (tile.thread_rank() == 0) out[blockIdx.x] = w;
    }
}
