// Block reduction with cooperative groups, shared by cg_reduce_*.cu: each 32-thread tile
// reduces with cg::reduce, the first tile combines the per-tile partials.
#pragma once
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
namespace cg = cooperative_groups;

template <typename T, typename Op>
__device__ T block_reduce(T v, T identity, Op op, T* partial) {
    cg::thread_block block = cg::this_thread_block();
    cg::thread_block_tile<32> tile = cg::tiled_partition<32>(block);
    T s = cg::reduce(tile, v, op);
    if (tile.thread_rank() == 0) partial[tile.meta_group_rank()] = s;
    block.sync();
    T w = identity;
    if (tile.meta_group_rank() == 0) {
        w = tile.thread_rank() < tile.meta_group_size() ? partial[tile.thread_rank()] : identity;
        w = cg::reduce(tile, w, op);
    }
    return w;
}
