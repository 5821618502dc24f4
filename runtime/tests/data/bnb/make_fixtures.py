"""Writes the bitsandbytes NF4 fixtures the `nf4_checkpoint` tests load.

Made with (pip, in a fresh venv, CPU only):
    python 3.11, torch 2.15.0, bitsandbytes 0.50.2, safetensors 0.8.0, numpy 2.4.6

Run from this directory: `python make_fixtures.py`. It writes
- `nf4_weights.safetensors`: four quantised linear weights, keys exactly as HuggingFace
  transformers saves a bitsandbytes 4-bit model (`<name>.weight` packed u8, and
  `<name>.weight.<key>` for every entry of `quant_state.as_dict(packed=True)`);
- `nf4_reference.safetensors`: per weight, `<name>.original` (the f32 weight that was quantised)
  and `<name>.dequantized` (`bnb.functional.dequantize_4bit` of the saved state, f32).
"""

import torch
import bitsandbytes as bnb
import bitsandbytes.functional as F
from safetensors.torch import save_file

WEIGHTS = [
    # name, (n, k), compress_statistics (double quantisation)
    ("proj_a", (64, 128), False),
    ("proj_b", (64, 128), True),
    ("proj_c", (96, 256), False),
    ("proj_d", (96, 256), True),
]
BLOCKSIZE = 64


def main():
    gen = torch.Generator().manual_seed(14)
    state, reference = {}, {}
    for name, shape, double in WEIGHTS:
        # A little spread in the block maxima so the nested absmax codes differ.
        w = torch.randn(shape, generator=gen, dtype=torch.float32)
        w = w * torch.rand((shape[0], 1), generator=gen) * 0.2
        packed, qs = F.quantize_4bit(
            w, blocksize=BLOCKSIZE, compress_statistics=double, quant_type="nf4"
        )
        key = f"{name}.weight"
        state[key] = packed.contiguous()
        for k, v in qs.as_dict(packed=True).items():
            state[f"{key}.{k}"] = v.contiguous()
        deq = F.dequantize_4bit(packed, qs, quant_type="nf4")
        reference[f"{name}.original"] = w.contiguous()
        reference[f"{name}.dequantized"] = deq.to(torch.float32).contiguous()
    save_file(state, "nf4_weights.safetensors")
    save_file(reference, "nf4_reference.safetensors")
    for k, v in state.items():
        print(k, v.dtype, tuple(v.shape))
    print("versions: torch", torch.__version__, "bitsandbytes", bnb.__version__)


if __name__ == "__main__":
    main()
