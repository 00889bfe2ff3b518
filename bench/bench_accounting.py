#!/usr/bin/env python
"""DP-REC privacy accounting speed (target: T*B = 4e5 steps over 256 orders in < 0.5 s).

Usage::

    python bench/bench_accounting.py            # 5 repeats, median time, PASS/MISS line
    python bench/bench_accounting.py --repeat 20

Times :func:`dprec.accounting.dprec_epsilon` for T = 4000 rounds of B = 100 clients (4e5 steps)
out of N = 3500 (FEMNIST of the DP-REC paper), c = 1.41, delta = N^-1.1, orders 2..257, with the
reverse term bounded (the paper's variant) and exact (trapezoid quadrature), and the
:class:`dprec.accounting.Accountant` path (4e5 DP-REC steps composed, then eps). Also times
sampled Gaussian RDP over dprec's default orders for reference (no target).
"""

from __future__ import annotations

import argparse
import statistics
import time

from dprec.accounting import (
    DEFAULT_ORDERS,
    DPREC_DEFAULT_ORDERS,
    Accountant,
    DPRECEvent,
    dprec_epsilon,
    sampled_gaussian_rdp,
)

TARGET_S = 0.5


def _time(fn, repeat: int) -> tuple[float, object]:
    result = fn()  # warm-up (imports, caches)
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    n, t, b, c = 3500, 4000, 100, 1.41
    delta = n**-1.1
    rows = []
    for reverse in ("bound", "exact"):
        seconds, res = _time(
            lambda: dprec_epsilon(rounds=t, clients_per_round=b, num_clients=n, clip_multiplier=c, delta=delta, bits=None, reverse=reverse),
            args.repeat,
        )
        rows.append((f"dprec_epsilon, reverse={reverse}", seconds, res.epsilon))

    def via_accountant() -> float:
        acc = Accountant(orders=DPREC_DEFAULT_ORDERS)
        acc.compose(DPRECEvent(clip_multiplier=c, sampling_rate=1 / n, bits=None), count=t * b)
        return acc.get_epsilon(delta)

    seconds, eps = _time(via_accountant, args.repeat)
    rows.append(("Accountant + DPRECEvent x 4e5", seconds, eps))
    seconds, _ = _time(lambda: sampled_gaussian_rdp(0.01, 1.1, DEFAULT_ORDERS), args.repeat)
    rows.append((f"sampled_gaussian_rdp, {DEFAULT_ORDERS.size} orders (no target)", seconds, float("nan")))

    print(f"DP-REC accounting benchmark: T*B = {t * b:.0e} steps, {DPREC_DEFAULT_ORDERS.size} orders, median of {args.repeat}")
    print(f"{'what':<55} {'seconds':>10} {'epsilon':>10}")
    for name, seconds, eps in rows:
        print(f"{name:<55} {seconds:>10.4f} {eps:>10.4f}")
    worst = max(seconds for name, seconds, _ in rows[:3])
    verdict = "PASS" if worst < TARGET_S else "MISS"
    print(f"performance target: DP-REC eps for 4e5 steps over 256 orders < {TARGET_S} s: slowest {worst:.4f} s -> {verdict}")


if __name__ == "__main__":
    main()
