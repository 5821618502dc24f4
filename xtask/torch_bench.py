"""PyTorch baselines for `cargo xtask bench --gpu`: times scaled_dot_product_attention and
conv2d on the shapes the Rust side times (see xtask/src/gpu/bench.rs) with CUDA events
(5 warm-up runs, median of 31) and writes {"attention_ms": .., "conv2d_ms": ..} to argv[1].
Exits non-zero when torch or a CUDA device is missing."""
import json
import sys

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    sys.exit(1)
if not torch.cuda.is_available():
    sys.exit(1)


def median_ms(fn, warmup=5, timed=31):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(timed):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    times.sort()
    return times[len(times) // 2]


dev = "cuda"
q = torch.full((2, 16, 1024, 128), 0.01, dtype=torch.float16, device=dev)
attention = median_ms(lambda: F.scaled_dot_product_attention(q, q, q, is_causal=True))
x = torch.full((8, 64, 56, 56), 0.1, dtype=torch.float32, device=dev)
w = torch.full((128, 64, 3, 3), 0.1, dtype=torch.float32, device=dev)
torch.backends.cudnn.allow_tf32 = False
conv = median_ms(lambda: F.conv2d(x, w, padding=1))
with open(sys.argv[1], "w") as f:
    json.dump({"attention_ms": attention, "conv2d_ms": conv}, f)
