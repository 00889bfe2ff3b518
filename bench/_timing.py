"""Timing and table helpers shared by the CPU benchmark scripts in bench/ (not part of the package).

Every script imports this module from its own directory (``python bench/bench_x.py`` puts bench/
first on ``sys.path``).
"""

from __future__ import annotations

import math
import statistics
import sys
import time
from typing import Any, Callable, Sequence

import numpy as np


def calls_per_measurement(fn: Callable[[], object], min_time: float) -> int:
    """Back-to-back calls needed for a measurement of at least ``min_time`` seconds (one untimed call first)."""
    t0 = time.perf_counter()
    fn()
    dt = time.perf_counter() - t0
    return max(1, int(math.ceil(min_time / max(dt, 1e-9))))


def round_robin(methods: Sequence[tuple[str, Callable[[], Any]]], repeat: int, min_time: float) -> tuple[dict, dict]:
    """Median seconds per call of each method (methods interleaved, so a noisy neighbour hits all of
    them alike), and each method's last result."""
    ks = {name: calls_per_measurement(fn, min_time) for name, fn in methods}
    times: dict[str, list[float]] = {name: [] for name, _ in methods}
    last: dict[str, Any] = {}
    for _ in range(repeat):
        for name, fn in methods:
            k = ks[name]
            t0 = time.perf_counter()
            for _ in range(k):
                res = fn()
            times[name].append((time.perf_counter() - t0) / k)
            last[name] = res
    return {name: statistics.median(v) for name, v in times.items()}, last


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A markdown table with columns padded to their widest cell (numbers right-aligned)."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    lines = ["| " + " | ".join(h.ljust(w) for h, w in zip(headers, widths)) + " |"]
    lines.append("|" + "|".join("-" * (w + 1) + ":" for w in widths) + "|")
    for r in rows:
        lines.append("| " + " | ".join(c.rjust(w) for c, w in zip(r, widths)) + " |")
    return "\n".join(lines)


def mrate(count: float, seconds: float) -> str:
    """``count / seconds`` in millions per second."""
    return f"{count / seconds / 1e6:,.2f}" if seconds > 0 else "n/a"


def rel_l2(a: Any, b: Any) -> float:
    """``|a - b| / |b|`` in float64 L2 norms."""
    a64, b64 = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(np.linalg.norm(a64 - b64) / max(np.linalg.norm(b64), 1e-300))


def progress(msg: str, t_start: float) -> None:
    """A progress line on stderr with the seconds since ``t_start``."""
    print(f"  {msg} ({time.perf_counter() - t_start:.0f}s)", file=sys.stderr, flush=True)
