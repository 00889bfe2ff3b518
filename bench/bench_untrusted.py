"""What it costs a server to refuse crafted messages (issue 33): time and peak memory.

A crafted DP-REC message claims as many 1-bit groups as its length allows (uniform-bits flag,
valid CRC-32: a well-formed message of another layout), and a crafted QMGeo message claims as
many 1-bit coordinates; each is refused by the server's codec (``codec.decode(bytes, template)``,
which parses against the server's own layout) and by ``from_bytes(bytes, layout)``. For
contrast, the parse of the same DP-REC bytes without a layout (accepted: it is well formed).

    python bench/bench_untrusted.py                # 1, 10 and 100 MiB
    python bench/bench_untrusted.py --mib 1 4      # other sizes

Peak memory is Python's (tracemalloc) during the call; times are the best of ``--repeat`` runs.
"""

from __future__ import annotations

import argparse
import struct
import time
import tracemalloc
import zlib

import numpy as np

import dprec
from dprec import DPRECMessage, QMGeoMessage


def crafted_dprec(nbytes: int) -> bytes:
    groups = (nbytes - 33 - 4) * 8
    body = struct.pack("<4sBBHQ8sI", b"DPRC", 1, 1, 1, 123, b"\0" * 8, groups) + bytes([1]) + bytes(groups // 8)
    return body + struct.pack("<I", zlib.crc32(body) & 0xFFFFFFFF)


def crafted_qmgeo(nbytes: int) -> bytes:
    count = (nbytes - 32 - 4) * 8
    body = struct.pack("<4sBBHI8sQ", b"QMGO", 1, 1, 0, 2, b"\0" * 8, count) + bytes(count // 8)
    return body + struct.pack("<I", zlib.crc32(body) & 0xFFFFFFFF)


def measure(call, repeat: int) -> tuple[float, float, str]:
    best = float("inf")
    outcome = ""
    peak = 0
    for _ in range(repeat):
        tracemalloc.start()
        t = time.perf_counter()
        try:
            call()
            outcome = "accepted"
        except ValueError as e:
            outcome = "ValueError: " + str(e)[:60]
        best = min(best, time.perf_counter() - t)
        peak = max(peak, tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
    return best * 1e3, peak / 2**20, outcome


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mib", type=float, nargs="+", default=[1, 10, 100])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--without-layout-up-to", type=float, default=1, help="MiB; larger takes seconds")
    args = parser.parse_args()
    template = {"conv.weight": np.zeros((16, 3, 3, 3), np.float32), "fc.weight": np.zeros((10, 256), np.float32)}
    codec = dprec.DPRECCodec(sigma=0.1, bits=7)
    qcodec = dprec.QMGeoCodec(w_max=1.0, levels=4, p=0.5)
    layout, qlayout = codec.layout(template), qcodec.layout(template)
    print(f"dprec {dprec.__version__}; the server's layout: {layout.num_groups} groups, {layout.message_nbytes} bytes")
    print(f"{'message':<34} {'MiB':>6} {'ms':>9} {'peak MiB':>9}  outcome")
    for mib in args.mib:
        n = int(mib * 2**20)
        blob, qblob = crafted_dprec(n), crafted_qmgeo(n)
        rows = [
            ("DP-REC, codec.decode", lambda: codec.decode(blob, template)),
            ("DP-REC, from_bytes(layout)", lambda: DPRECMessage.from_bytes(blob, layout)),
            ("QMGeo, codec.decode", lambda: qcodec.decode(qblob, template)),
            ("QMGeo, from_bytes(layout)", lambda: QMGeoMessage.from_bytes(qblob, qlayout)),
            ("QMGeo, from_bytes (no layout)", lambda: QMGeoMessage.from_bytes(qblob)),
        ]
        if mib <= args.without_layout_up_to:
            rows.append(("DP-REC, from_bytes (no layout)", lambda: DPRECMessage.from_bytes(blob)))
        for name, call in rows:
            ms, peak, outcome = measure(call, args.repeat)
            print(f"{name:<34} {mib:>6g} {ms:>9.3f} {peak:>9.1f}  {outcome}")


if __name__ == "__main__":
    main()
