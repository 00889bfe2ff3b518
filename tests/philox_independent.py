"""An independent Philox4x32-10 for the tests, written from the Random123 description
with Python integers per block (vectorised over blocks with object-free uint64 maths),
deliberately sharing no code with dprec.reference.philox."""

from __future__ import annotations

import numpy as np

MULT = (0xD2511F53, 0xCD9E8D57)
WEYL = (0x9E3779B9, 0xBB67AE85)


def philox_blocks(blocks: np.ndarray, substream: int, group: int, domain: int, seed: int) -> np.ndarray:
    """Output words (n, 4) for counters (blocks[i], substream, group, domain)."""
    n = blocks.size
    x = [blocks.astype(np.uint64), np.full(n, substream, np.uint64), np.full(n, group, np.uint64), np.full(n, domain, np.uint64)]
    key = [seed & 0xFFFFFFFF, (seed >> 32) & 0xFFFFFFFF]
    lo32 = np.uint64(0xFFFFFFFF)
    for _ in range(10):
        prod_a = x[0] * np.uint64(MULT[0])
        prod_b = x[2] * np.uint64(MULT[1])
        x = [
            (prod_b >> np.uint64(32)) ^ x[1] ^ np.uint64(key[0]),
            prod_b & lo32,
            (prod_a >> np.uint64(32)) ^ x[3] ^ np.uint64(key[1]),
            prod_a & lo32,
        ]
        key = [(key[0] + WEYL[0]) & 0xFFFFFFFF, (key[1] + WEYL[1]) & 0xFFFFFFFF]
    return np.stack(x, axis=1).astype(np.uint32)


def stream(seed: int, count: int, substream: int = 0, group: int = 0, domain: int = 0, offset: int = 0) -> np.ndarray:
    first = offset // 4
    last = (offset + count - 1) // 4
    words = philox_blocks(np.arange(first, last + 1, dtype=np.uint64), substream, group, domain, seed).reshape(-1)
    return words[offset - 4 * first : offset - 4 * first + count]
