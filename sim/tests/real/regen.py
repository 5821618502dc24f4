#!/usr/bin/env python3
"""Regenerates the real-compiler corpus: PTX from NVRTC (cuda/*.cu) and Triton
(triton_kernels.py), seeded inputs, and expected outputs computed independently with numpy in
f64. See README.md for the wheels it needs. Writes ptx/ and data/ next to this file.

Data files are raw little-endian arrays: data/<case>/<arg>.bin for inputs and
data/<case>/<arg>.expected.bin for expected outputs (f32 for float outputs, whatever their
device type: the exact f64 reference rounded once; i32/u32 for integer outputs). Launch
configurations and tolerances live in ../real_compiler.rs; the shapes here must agree with it.
"""

import ctypes
import os
import re
import shutil
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
PTX_DIR = HERE / "ptx"
DATA_DIR = HERE / "data"

# ---------------------------------------------------------------------------------------------
# NVRTC through ctypes


def _pkg_dir(module):
    return Path(list(module.__path__)[0])


def nvrtc_compile(name, source, extra=()):
    import nvidia.cuda_cccl
    import nvidia.cuda_nvrtc
    import nvidia.cuda_runtime

    lib = ctypes.CDLL(str(_pkg_dir(nvidia.cuda_nvrtc) / "lib" / "libnvrtc.so.12"))
    prog = ctypes.c_void_p()
    check = lambda rc, what: rc == 0 or sys.exit(f"{name}: {what} failed ({rc})")  # noqa: E731
    check(lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), name.encode(), 0, None, None),
          "nvrtcCreateProgram")
    opts = [
        b"--gpu-architecture=compute_80",
        b"-default-device",
        b"-std=c++17",
        b"-I" + str(_pkg_dir(nvidia.cuda_runtime) / "include").encode(),
        b"-I" + str(_pkg_dir(nvidia.cuda_cccl) / "include").encode(),
        b"-I" + str(HERE / "cuda").encode(),
        *extra,
    ]
    rc = lib.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts))
    size = ctypes.c_size_t()
    lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
    log = ctypes.create_string_buffer(size.value)
    lib.nvrtcGetProgramLog(prog, log)
    if rc != 0:
        sys.exit(f"{name}: compilation failed:\n{log.value.decode()}")
    lib.nvrtcGetPTXSize(prog, ctypes.byref(size))
    ptx = ctypes.create_string_buffer(size.value)
    check(lib.nvrtcGetPTX(prog, ptx), "nvrtcGetPTX")
    lib.nvrtcDestroyProgram(ctypes.byref(prog))
    return ptx.value.decode()


def nvrtc_version():
    import nvidia.cuda_nvrtc

    lib = ctypes.CDLL(str(_pkg_dir(nvidia.cuda_nvrtc) / "lib" / "libnvrtc.so.12"))
    major, minor = ctypes.c_int(), ctypes.c_int()
    lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
    return f"{major.value}.{minor.value}"


# ---------------------------------------------------------------------------------------------
# data files


def put(case, name, array):
    """Writes one little-endian array to data/<case>/<name>.bin."""
    array = np.ascontiguousarray(array)
    array = array.astype(array.dtype.newbyteorder("<"), copy=False)
    d = DATA_DIR / case
    d.mkdir(parents=True, exist_ok=True)
    (d / f"{name}.bin").write_bytes(array.tobytes())


def expect(case, name, reference):
    """The expected output: floats as f32 (exact reference rounded once), ints as they are."""
    ref = np.asarray(reference)
    if ref.dtype.kind == "f":
        ref = ref.astype(np.float32)
    put(case, f"{name}.expected", ref)


def f16(rng, *shape):
    return rng.uniform(-1.0, 1.0, size=shape).astype(np.float16)


def f32(rng, *shape, lo=-1.0, hi=1.0):
    return rng.uniform(lo, hi, size=shape).astype(np.float32)


def f64(a):
    return np.asarray(a, dtype=np.float64)


# ---------------------------------------------------------------------------------------------
# Triton cases


def triton_cases():
    import triton_kernels as tk

    ptx = {}
    M, N, K = 96, 80, 80  # ragged against the 64x64x32 tiles; strides multiples of 16
    mm_args = lambda a, b, c: {  # noqa: E731
        "a": (a, 0), "b": (b, 0), "c": (c, 0), "M": ("i32", M), "N": ("i32", N), "K": ("i32", K),
        "stride_am": ("i32", K), "stride_ak": ("i32", 1), "stride_bk": ("i32", N),
        "stride_bn": ("i32", 1), "stride_cm": ("i32", N), "stride_cn": ("i32", 1),
    }
    tiles = {"BM": 64, "BN": 64, "BK": 32}
    ptx["triton_matmul_f16_f16"] = tk.compile_ptx(
        tk.matmul, mm_args("*fp16", "*fp16", "*fp16"), {**tiles, "PRECISION": None})
    ptx["triton_matmul_f16_f32"] = tk.compile_ptx(
        tk.matmul, mm_args("*fp16", "*fp16", "*fp32"), {**tiles, "PRECISION": None})
    ptx["triton_matmul_tf32"] = tk.compile_ptx(
        tk.matmul, mm_args("*fp32", "*fp32", "*fp32"), {**tiles, "PRECISION": None})
    ptx["triton_matmul_f32_ieee"] = tk.compile_ptx(
        tk.matmul, mm_args("*fp32", "*fp32", "*fp32"), {**tiles, "PRECISION": "ieee"})

    rng = np.random.default_rng(10)
    a, b = f16(rng, M, K), f16(rng, K, N)
    ref = f64(a) @ f64(b)
    for case in ["triton_matmul_f16_f16", "triton_matmul_f16_f32"]:
        put(case, "a", a)
        put(case, "b", b)
        expect(case, "c", ref)
    a, b = f32(rng, M, K), f32(rng, K, N)
    ref = f64(a) @ f64(b)
    for case in ["triton_matmul_tf32", "triton_matmul_f32_ieee"]:
        put(case, "a", a)
        put(case, "b", b)
        expect(case, "c", ref)

    H, S, D = 2, 80, 64
    ptx["triton_attention_fwd"] = tk.compile_ptx(
        tk.attention_fwd,
        {"q_ptr": ("*fp16", 0), "k_ptr": ("*fp16", 0), "v_ptr": ("*fp16", 0),
         "o_ptr": ("*fp16", 0), "sm_scale": ("fp32", 0.125), "seq_len": ("i32", S),
         "stride_head": ("i32", S * D), "stride_row": ("i32", D)},
        {"BLOCK_M": 64, "BLOCK_N": 32, "HEAD_DIM": D})
    q, k, v = f16(rng, H, S, D), f16(rng, H, S, D), f16(rng, H, S, D)
    scores = np.einsum("hqd,hkd->hqk", f64(q), f64(k)) * 0.125
    p = np.exp(scores - scores.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    case = "triton_attention_fwd"
    put(case, "q", q)
    put(case, "k", k)
    put(case, "v", v)
    expect(case, "o", np.einsum("hqk,hkd->hqd", p, f64(v)))

    R, C = 37, 100
    ptx["triton_softmax"] = tk.compile_ptx(
        tk.softmax_rows,
        {"out_ptr": ("*fp32", 0), "in_ptr": ("*fp32", 0), "in_stride": ("i32", C),
         "out_stride": ("i32", C), "n_cols": ("i32", C)},
        {"BLOCK": 128})
    x = f32(rng, R, C, lo=-4.0, hi=4.0)
    e = np.exp(f64(x) - f64(x).max(axis=1, keepdims=True))
    case = "triton_softmax"
    put(case, "x", x)
    expect(case, "y", e / e.sum(axis=1, keepdims=True))
    return ptx


# ---------------------------------------------------------------------------------------------
# NVRTC cases


def cuda_cases():
    ptx = {}
    for src in sorted((HERE / "cuda").glob("*.cu")):
        # The buggy kernels carry line information (.file/.loc), so findings name buggy.cu lines.
        extra = [b"-lineinfo"] if src.stem == "buggy" else []
        text = nvrtc_compile(src.name, src.read_text(), extra)
        # NVRTC makes the program name absolute against the working directory: keep the
        # committed PTX free of the local checkout path.
        text = re.sub(r'(\.file\s+\d+ ")[^"]*/' + re.escape(src.name) + '"',
                      r'\1sim/tests/real/cuda/' + src.name + '"', text)
        ptx[f"cuda_{src.stem}"] = text
    rng = np.random.default_rng(12)

    n = 1000
    xi = rng.integers(-1000, 1000, size=n, dtype=np.int32)
    put("cg_block_sum_i32", "x", xi)
    expect("cg_block_sum_i32", "out",
           np.array([xi[b * 256:(b + 1) * 256].sum() for b in range(4)], dtype=np.int32))
    xf = f32(rng, n)
    put("cg_block_sum_f32", "x", xf)
    expect("cg_block_sum_f32", "out", [f64(xf[b * 256:(b + 1) * 256]).sum() for b in range(4)])
    put("cg_block_max_f32", "x", xf)
    expect("cg_block_max_f32", "out", [xf[b * 256:(b + 1) * 256].max() for b in range(4)])

    xs = rng.integers(-100, 100, size=n, dtype=np.int32)
    put("scan_inclusive_i32", "x", xs)
    expect("scan_inclusive_i32", "y",
           np.concatenate([np.cumsum(xs[b:b + 256]) for b in range(0, n, 256)]).astype(np.int32))

    n, bins = 3000, 64
    # Runs of equal keys so that lanes of a warp share bins, plus uniformly random keys.
    runs = np.repeat(rng.integers(0, 1000, size=n // 30), rng.integers(1, 60, size=n // 30))[:n // 2]
    keys = np.concatenate([runs, rng.integers(0, 1000, size=n - len(runs))]).astype(np.uint32)
    put("histogram_match_any", "keys", keys)
    expect("histogram_match_any", "hist",
           np.bincount(keys % bins, minlength=bins).astype(np.uint32))

    rows, cols = 70, 45
    m = f32(rng, rows, cols)
    put("transpose_smem", "in", m)
    expect("transpose_smem", "out", m.T)

    rows, cols = 12, 300
    x = rng.normal(0.5, 2.0, size=(rows, cols)).astype(np.float32)
    gamma, beta = f32(rng, cols, lo=0.5, hi=1.5), f32(rng, cols)
    mean = f64(x).mean(axis=1, keepdims=True)
    var = ((f64(x) - mean) ** 2).mean(axis=1, keepdims=True)
    case = "layernorm_f32"
    put(case, "x", x)
    put(case, "gamma", gamma)
    put(case, "beta", beta)
    expect(case, "y", (f64(x) - mean) / np.sqrt(var + 1e-5) * f64(gamma) + f64(beta))

    rows, cols = 12, 333
    x = f32(rng, rows, cols, lo=-8.0, hi=8.0)
    e = np.exp(f64(x) - f64(x).max(axis=1, keepdims=True))
    put("softmax_f32", "x", x)
    expect("softmax_f32", "y", e / e.sum(axis=1, keepdims=True))

    x = f32(rng, 300, lo=0.0, hi=10.0)
    put("checked_sqrt_pass", "x", x)
    expect("checked_sqrt_pass", "y", np.sqrt(x))  # sqrt.rn: both sides correctly rounded
    x = x.copy()
    x[137] = -1.0
    put("checked_sqrt_fails", "x", x)

    n = 200
    x = f32(rng, n, lo=-2.0, hi=2.0)
    table = f64([0.5, 1.0, 2.0, -4.0])
    put("device_globals", "x", x)
    expect("device_globals", "y", (f64(x) * 1.5 + table[np.arange(n) & 3]) * f64(x))
    expect("device_globals", "calls", np.array([n], dtype=np.uint32))

    a, b = f16(rng, 16, 16), f16(rng, 16, 8)
    put("mma_tile_16x8x16", "a", a)
    put("mma_tile_16x8x16", "b", b)
    expect("mma_tile_16x8x16", "c", f64(a) @ f64(b))
    M, N, K = 64, 64, 128
    a, b = f16(rng, M, K), f16(rng, K, N)
    put("mma_gemm_pipelined", "a", a)
    put("mma_gemm_pipelined", "b", b)
    expect("mma_gemm_pipelined", "c", f64(a) @ f64(b))

    # Inputs of the deliberately buggy kernels (their outputs are not compared).
    put("bug_out_of_bounds", "x", f32(rng, 100))
    put("bug_shared_race", "x", f32(rng, 128))
    put("bug_missing_syncthreads", "x", f32(rng, 512))
    put("bug_divergent_barrier", "x", f32(rng, 64))
    put("bug_exit_before_barrier", "x", f32(rng, 64))
    put("bug_misaligned", "bytes", rng.integers(0, 256, size=132, dtype=np.uint8))
    put("bug_shfl_divergent", "x", f32(rng, 32))

    # block_vote.cu: blocks of 200 threads (last warp partial), n = 950 (last block ragged).
    n, bs = 950, 200
    x = f32(rng, n)
    votes = []
    for b in range(0, n, bs):
        xb = x[b:b + bs]
        votes += [(xb > 0).sum(), (xb > np.float32(0.99)).any(),
                  (xb > np.float32(-0.99)).all(), np.isfinite(xb).all()]
    put("block_vote", "x", x)
    expect("block_vote", "out", np.array(votes, dtype=np.uint32))
    n = 1000
    x = f32(rng, n)
    sel = x > np.float32(0.25)
    rank = np.full(n, 0xFFFFFFFF, dtype=np.uint32)
    for w in range(0, n, 32):
        s = sel[w:w + 32]
        rank[w:w + 32][s] = np.arange(s.sum())
    put("warp_agg_count", "x", x)
    expect("warp_agg_count", "count", np.array([sel.sum()], dtype=np.uint32))
    expect("warp_agg_count", "rank", rank)
    n, bs = 1000, 100
    x = f32(rng, n)
    put("tile_sum_partial", "x", x)
    expect("tile_sum_partial", "out", [f64(x[b:b + bs]).sum() for b in range(0, n, bs)])
    return ptx


def main():
    sys.dont_write_bytecode = True  # no __pycache__ in the source tree
    sys.path.insert(0, str(HERE))
    for d in (PTX_DIR, DATA_DIR):
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir()
    ptx = {**cuda_cases(), **triton_cases()}
    for name, text in sorted(ptx.items()):
        (PTX_DIR / f"{name}.ptx").write_text(text)
    import triton

    print(f"NVRTC {nvrtc_version()}, Triton {triton.__version__}, numpy {np.__version__}: "
          f"{len(ptx)} PTX modules, {sum(1 for _ in DATA_DIR.iterdir())} data folders")


if __name__ == "__main__":
    main()
