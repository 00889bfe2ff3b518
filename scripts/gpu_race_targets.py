"""Small runs of every CUDA kernel that shares memory between threads (the FWHT passes,
the count-sketch warp fold), for compute-sanitizer's racecheck and synccheck, which are
too slow for the whole GPU test suite. Each result is checked against the CPU.

    compute-sanitizer --tool racecheck python scripts/gpu_race_targets.py
"""

from __future__ import annotations

import numpy as np
import torch

from dprec.transforms.hadamard import RandomizedHadamard, fwht
from dprec.transforms.sketch import CountSketch


def same(a, b) -> bool:
    a = a.cpu().numpy() if hasattr(a, "cpu") else np.asarray(a)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def main() -> None:
    rng = np.random.default_rng(0)
    checks = 0
    for dtype in (np.float32, np.float64):
        for log2n in (5, 13, 14, 15, 16, 20):  # one pass (each buffer size), two passes
            host = rng.standard_normal(1 << log2n).astype(dtype)
            assert same(fwht(torch.from_numpy(host).cuda()), fwht(host, backend="cpu")), (dtype, log2n)
            checks += 1
        host = rng.standard_normal((3, 5000)).astype(dtype)
        rot = RandomizedHadamard(5000, seed=9, repeats=2)
        z = rot.forward(torch.from_numpy(host).cuda())
        assert same(z, rot.forward(host, backend="cpu"))
        assert same(rot.inverse(z), rot.inverse(rot.forward(host, backend="cpu"), backend="cpu"))
        checks += 2
    for cols in (1, 3, 64, 1 << 12):  # warp fold (long runs) and one-thread fold
        x = rng.standard_normal(1 << 16).astype(np.float32)
        cs = CountSketch(x.size, 3, cols, seed=cols)
        assert same(cs.encode(torch.from_numpy(x).cuda()), cs.encode(x, backend="cpu")), cols
        checks += 1
    torch.cuda.synchronize()
    print(f"{checks} GPU results bit-identical to the CPU")


if __name__ == "__main__":
    main()
