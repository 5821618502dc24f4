// Tensor-core kernels written with inline PTX: cp.async global->shared copies, ldmatrix
// fragment loads (.trans for the row-major B operand) and mma.sync m16n8k16 f16 x f16 -> f32.
// Halves travel as raw 16-bit words so that no fp16 header is needed.
typedef unsigned short half_bits;

__device__ __forceinline__ unsigned smem_addr(const void* p) {
    return (unsigned)__cvta_generic_to_shared(p);
}
__device__ __forceinline__ void cp_async_16(void* dst, const void* src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_addr(dst)), "l"(src));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

__device__ __forceinline__ void ldmatrix_x4(unsigned* r, const void* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldmatrix_x2_trans(unsigned* r, const void* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1])
                 : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned* r, const void* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}
__device__ __forceinline__ void mma_16816(float* c, const unsigned* a, const unsigned* b) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// One warp: C[16][8] (f32) = A[16][16] (row-major f16) x B[16][8] (row-major f16).
extern "C" __global__ void mma_tile_16x8x16(const half_bits* a, const half_bits* b, float* c) {
    __shared__ __align__(16) half_bits sa[16 * 16];
    __shared__ __align__(16) half_bits sb[16 * 8];
    int lane = threadIdx.x;
    cp_async_16(sa + lane * 8, a + lane * 8);
    if (lane < 16) cp_async_16(sb + lane * 8, b + lane * 8);
    cp_async_commit();
    cp_async_wait<0>();
    __syncwarp();
    unsigned fa[4], fb[2];
    ldmatrix_x4(fa, sa + (lane % 16) * 16 + (lane / 16) * 8);
    ldmatrix_x2_trans(fb, sb + (lane % 16) * 8);
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    mma_16816(acc, fa, fb);
    int row = lane / 4, col = (lane % 4) * 2;
    c[row * 8 + col] = acc[0];
    c[row * 8 + col + 1] = acc[1];
    c[(row + 8) * 8 + col] = acc[2];
    c[(row + 8) * 8 + col + 1] = acc[3];
}

// C[M][N] (f32) = A[M][K] x B[K][N], both row-major f16; M, N multiples of 32, K of 32.
// A 32x32 block tile, 4 warps of 16x16, 32-deep k tiles double-buffered with cp.async
// (the next tile's copies are in flight while the current one is multiplied).
#define BT 32
#define PAD 8
extern "C" __global__ void mma_gemm_pipelined(const half_bits* a, const half_bits* b, float* c,
                                              int M, int N, int K) {
    __shared__ __align__(16) half_bits sa[2][BT][BT + PAD];
    __shared__ __align__(16) half_bits sb[2][BT][BT + PAD];
    int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    int wm = (warp / 2) * 16, wn = (warp % 2) * 16;
    int bm = blockIdx.y * BT, bn = blockIdx.x * BT;
    // Each thread copies one 16-byte chunk of A's tile and one of B's per stage.
    int cr = tid / 4, cc = (tid % 4) * 8;
    auto load = [&](int stage, int k0) {
        cp_async_16(&sa[stage][cr][cc], a + (size_t)(bm + cr) * K + k0 + cc);
        cp_async_16(&sb[stage][cr][cc], b + (size_t)(k0 + cr) * N + bn + cc);
        cp_async_commit();
    };
    float acc[2][4] = {};
    int tiles = K / BT;
    load(0, 0);
    for (int t = 0; t < tiles; ++t) {
        int s = t & 1;
        if (t + 1 < tiles) {
            load(s ^ 1, (t + 1) * BT);
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        for (int kk = 0; kk < BT; kk += 16) {
            unsigned fa[4], fb[4];
            ldmatrix_x4(fa, &sa[s][wm + lane % 16][kk + (lane / 16) * 8]);
            ldmatrix_x4_trans(fb, &sb[s][kk + lane % 16][wn + (lane / 16) * 8]);
            mma_16816(acc[0], fa, fb);
            mma_16816(acc[1], fa, fb + 2);
        }
        __syncthreads();
    }
    int row = bm + wm + lane / 4;
    for (int j = 0; j < 2; ++j) {
        int col = bn + wn + j * 8 + (lane % 4) * 2;
        c[(size_t)row * N + col] = acc[j][0];
        c[(size_t)row * N + col + 1] = acc[j][1];
        c[(size_t)(row + 8) * N + col] = acc[j][2];
        c[(size_t)(row + 8) * N + col + 1] = acc[j][3];
    }
}
