#!/usr/bin/env python
"""Server-side DP-REC aggregation: many clients' (seed, index) into one update.

Usage::

    python bench/bench_aggregate.py                   # 100 clients, d = 2**20 and 2**22
    python bench/bench_aggregate.py --clients 1000 --log2-d 18

Compares, in one run and on the same messages:

* ``rec.accumulate`` (native, one pass over the output, float32 and float64 accumulators);
* the obvious NumPy loop a user would write on top of the native decoder:
  ``out += w * rec.candidate(...)`` per client (a fresh candidate array per client);
* a single native decode (``rec.candidate``) as the unit of work.

Throughput is in client-elements per second (clients * d / time).
"""

from __future__ import annotations

import argparse

import numpy as np

from dprec import rec, runtime
from dprec.bench import median_time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--log2-d", type=int, nargs="*", default=[20, 22])
    parser.add_argument("--threads", type=int, default=0, help="native threads (0: every core)")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    runtime.set_num_threads(args.threads)

    rng = np.random.default_rng(0)
    n = args.clients
    seeds = rng.integers(0, 2**63, n, dtype=np.uint64)
    indices = rng.integers(0, 128, n, dtype=np.uint32)
    weights = np.full(n, 1.0 / n)
    sigma = 0.01
    print(f"DP-REC server aggregation: {n} clients, ISA {runtime.get_isa()}, {runtime.get_num_threads()} threads")
    print(f"{'d':>6} | {'accumulate f32':>15} {'accumulate f64':>15} {'decode+add loop':>16} | speed-up | one decode")
    print("-" * 84)
    for s in args.log2_d:
        d = 1 << s
        out32 = np.zeros(d, np.float32)
        out64 = np.zeros(d, np.float64)

        def acc32() -> None:
            rec.accumulate(out32, 0, seeds, indices, sigma=sigma, weights=weights)

        def acc64() -> None:
            rec.accumulate(out64, 0, seeds, indices, sigma=sigma, weights=weights)

        def loop() -> None:
            total = np.zeros(d, np.float64)
            for seed, k, w in zip(seeds.tolist(), indices.tolist(), weights.tolist()):
                total += w * rec.candidate(seed, 0, k, d, sigma=sigma)

        t32 = median_time(acc32, args.repeat, warm_up=True)
        t64 = median_time(acc64, args.repeat, warm_up=True)
        tloop = median_time(loop, args.repeat, warm_up=True)
        def one_decode() -> None:
            rec.candidate(int(seeds[0]), 0, int(indices[0]), d, sigma=sigma)

        tone = median_time(one_decode, 5 * args.repeat, warm_up=True)
        work = n * d / 1e6
        print(
            f"  2^{s:<3} | {work / t32:>11,.0f} M/s {work / t64:>11,.0f} M/s {work / tloop:>12,.0f} M/s |"
            f" {tloop / t64:>7.2f}x | {tone * 1e3:.2f} ms"
        )


if __name__ == "__main__":
    main()
