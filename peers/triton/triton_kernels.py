"""Triton kernels of the real-compiler corpus and their ahead-of-time compilation to PTX.

Compiled for sm_80 with Triton's defaults (num_warps=4, num_stages=3), specialised the way
Triton's JIT specialises a launch with the given argument values: integers equal to 1 become
constants, integers divisible by 16 and all pointers get the divisibility-16 hint.
"""

import os

os.environ.setdefault("TRITON_DISABLE_LINE_INFO", "1")
os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")  # today's default, stated explicitly

import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402


@triton.jit
def matmul(a, b, c, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
           BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, PRECISION: tl.constexpr):
    """C = A @ B with f32 accumulation; masks make ragged M, N, K exact."""
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        kk = k0 + rk
        x = tl.load(a + rm[:, None] * stride_am + kk[None, :] * stride_ak,
                    mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
        y = tl.load(b + kk[:, None] * stride_bk + rn[None, :] * stride_bn,
                    mask=(kk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc = tl.dot(x, y, acc, input_precision=PRECISION)
    tl.store(c + rm[:, None] * stride_cm + rn[None, :] * stride_cn, acc.to(c.dtype.element_ty),
             mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def attention_fwd(q_ptr, k_ptr, v_ptr, o_ptr, sm_scale, seq_len, stride_head, stride_row,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr):
    """Non-causal attention forward with an online softmax (one program per query block and
    head); keys past seq_len are masked to -inf."""
    head = tl.program_id(1)
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, HEAD_DIM)
    base = head * stride_head
    q = tl.load(q_ptr + base + rows[:, None] * stride_row + dims[None, :],
                mask=rows[:, None] < seq_len, other=0.0)
    m_i = tl.full((BLOCK_M,), float("-inf"), dtype=tl.float32)
    l_i = tl.zeros((BLOCK_M,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_M, HEAD_DIM), dtype=tl.float32)
    scale = sm_scale * 1.4426950408889634  # exp(x) = exp2(x * log2(e))
    for n0 in range(0, seq_len, BLOCK_N):
        cols = n0 + tl.arange(0, BLOCK_N)
        kt = tl.load(k_ptr + base + cols[None, :] * stride_row + dims[:, None],
                     mask=cols[None, :] < seq_len, other=0.0)
        s = tl.dot(q, kt) * scale
        s = tl.where(cols[None, :] < seq_len, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        p = tl.math.exp2(s - m_new[:, None])
        alpha = tl.math.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(v_ptr + base + cols[:, None] * stride_row + dims[None, :],
                    mask=cols[:, None] < seq_len, other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(tl.float16), v)
        m_i = m_new
    acc = acc / l_i[:, None]
    tl.store(o_ptr + base + rows[:, None] * stride_row + dims[None, :], acc.to(tl.float16),
             mask=rows[:, None] < seq_len)


@triton.jit
def softmax_rows(out_ptr, in_ptr, in_stride, out_stride, n_cols, BLOCK: tl.constexpr):
    """Softmax of one row per program."""
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    x = tl.load(in_ptr + row * in_stride + offs, mask=offs < n_cols, other=-float("inf"))
    x = x - tl.max(x, 0)
    e = tl.exp(x)
    tl.store(out_ptr + row * out_stride + offs, e / tl.sum(e, 0), mask=offs < n_cols)


def compile_ptx(fn, args, constexprs):
    """PTX of `fn` for sm_80, behind a comment line giving the launch's block size and
    dynamic shared memory. `args` maps each runtime argument name to (type, value) with type
    a Triton signature string ("*fp16", "i32", "fp32"); the value decides the specialisation."""
    signature, attrs, consts = {}, {}, dict(constexprs)
    for i, name in enumerate(fn.arg_names):
        if name in constexprs:
            signature[name] = "constexpr"
            continue
        ty, value = args[name]
        if ty.startswith("*"):
            attrs[(i,)] = [["tt.divisibility", 16]]
        elif ty == "i32" and value == 1:
            consts[name] = 1
            signature[name] = "constexpr"
            continue
        elif ty == "i32" and value % 16 == 0:
            attrs[(i,)] = [["tt.divisibility", 16]]
        signature[name] = ty
    src = ASTSource(fn=fn, signature=signature, constexprs=consts, attrs=attrs)
    kernel = triton.compile(src, target=GPUTarget("cuda", 80, 32))
    meta = kernel.metadata
    header = (f"// Triton {triton.__version__}, sm_80, num_warps={meta.num_warps}, "
              f"num_stages={meta.num_stages}: launch with {meta.num_warps * 32} threads per block "
              f"and {meta.shared} bytes of dynamic shared memory\n")
    return header + kernel.asm["ptx"]
