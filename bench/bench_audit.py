"""Benchmark of dprec.audit: 10^5 DP-REC trials at d = 16, K = 2^7 (server observer, zero relation).

Run: ``PYTHONPATH=python python bench/bench_audit.py [--trials N]``. Prints trials/s and the CPU
model. A benchmark, not a timed test (the issue's target: under a minute on 2 cores).
"""

from __future__ import annotations

import argparse
import time

from dprec import audit, bench, runtime


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--trials", type=int, default=100_000, help="trials per hypothesis (default 10^5)")
    p.add_argument("--threat-model", default="server")
    args = p.parse_args()
    t0 = time.perf_counter()
    r = audit.audit("dprec", threat_model=args.threat_model, trials=args.trials, dim=16, bits=7, seed=0,
                    progress=False)
    dt = time.perf_counter() - t0
    runs = 2 * args.trials  # canary and zero runs
    print(f"CPU: {bench.cpu_model()} (native threads: {runtime.get_num_threads()})")
    print(f"dprec audit, d=16, K=2^7, {args.threat_model}: {args.trials} trials per hypothesis ({runs} mechanism runs) "
          f"in {dt:.2f} s = {runs / dt:,.0f} runs/s ({args.trials / dt:,.0f} trials/s per hypothesis)")
    print(r.summary())


if __name__ == "__main__":
    main()
