#!/usr/bin/env python
"""Count-sketch encode and decode on the CPU: dprec against NumPy and PyTorch (docs/benchmarks.md).

Usage::

    python bench/bench_sketch.py                          # d = 2**20, 2**22, 2**24; rows 5, 15 (~3 min)
    python bench/bench_sketch.py --log2-d 20 21 22 23 24 --rows 5 15 --log2-cols 16

Compares, in one run, on the same float32 vector and the same buckets and signs (Philox
domains 1 and 2, docs/contract.md), with ``cols = 2**16`` by default:

Encode (count-mean, scale 1/rows, a fresh float32 table per call):

* **dprec**: ``CountSketch(d, rows, cols, seed).encode(x)`` (native, buckets and signs on
  the fly).
* **NumPy otf**: per row, the buckets and signs computed on the fly with
  ``dprec.philox.words(...)`` (native Philox, then ``(uint64(w) * cols) >> 32`` and the top
  bit), then ``np.bincount(buckets, weights=signs * x * scale, minlength=cols)``.
* **NumPy pre**: the same ``bincount`` with the buckets (``rows x d`` intp) and signs
  (``rows x d`` float32) precomputed outside the timed region, as a user who keeps them
  would (memory: 12 bytes * rows * d).
* **torch**: the csvec approach, ``table[r].scatter_add_(0, buckets[r], signs[r] * x)``
  with the precomputed tables as int64 / float32 tensors (sharing NumPy's memory) and
  ``torch.set_num_threads`` equal to dprec's thread count.

Decode:

* **dprec mean / median**: ``.decode(table, "mean")`` and ``.decode(table, "median")``.
* **NumPy mean otf / pre**: ``sum_r table[r, buckets[r]] * signs[r]``, with the buckets
  and signs computed on the fly as above or precomputed.
* **NumPy median pre**: ``np.median(table[r_idx, buckets] * signs, axis=0) * rows`` on the
  precomputed tables (the on-the-fly variant costs the same generation as mean otf).
* **torch mean**: ``out += table[r][buckets[r]] * signs[r]`` (no torch median: its even-count
  median is not the mean of the middle two).

Throughput is in M input elements per second, ``d / time`` (each element updates or
reads ``rows`` table cells). Speed-ups are dprec over the other method. Target (docs/benchmarks.md): >= 10x NumPy, read against both NumPy variants.

Method: the outputs of the timed calls (tables, decodes) are checked against NumPy's
(relative L2 < 1e-5). Each cell is the median of ``--repeat`` measurements
(``--repeat-large`` for rows * d >= 2**25), each at least ``--min-time`` long (back-to-back calls; one call when rows * d >= 2**25), methods round-robin
within a row, with a short pause after each PyTorch run for its OpenMP threads.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import Any, Callable

import numpy as np

from _timing import calls_per_measurement, rel_l2  # bench/_timing.py
from dprec import philox, runtime
from dprec.bench import cpu_model, package_version
from dprec.constants import DOMAIN_SKETCH_BUCKET, DOMAIN_SKETCH_SIGN
from dprec.transforms.sketch import CountSketch

SEED = 0x5EED_5CE7_0000_0004
TARGET_VS_NUMPY = 10.0
AGREE_TOL = 1e-5
_TORCH_PAUSE_S = 0.02


def otf_buckets_signs(r: int, d: int, cols: int) -> tuple[np.ndarray, np.ndarray]:
    """Row ``r``'s buckets (intp) and sign words' top bit (bool, True = minus) from Philox."""
    w = philox.words(SEED, d, substream=r, domain=DOMAIN_SKETCH_BUCKET)
    b = ((w.astype(np.uint64) * np.uint64(cols)) >> np.uint64(32)).astype(np.intp)
    neg = philox.words(SEED, d, substream=r, domain=DOMAIN_SKETCH_SIGN) >= np.uint32(1 << 31)
    return b, neg


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--log2-d", type=int, nargs="*", default=[20, 22, 24])
    parser.add_argument("--rows", type=int, nargs="*", default=[5, 15])
    parser.add_argument("--log2-cols", type=int, default=16)
    parser.add_argument("--threads", type=int, default=0, help="threads of dprec and torch (0: every core)")
    parser.add_argument("--repeat", type=int, default=5, help="measurements per cell, median reported")
    parser.add_argument("--repeat-large", type=int, default=3, help="measurements per cell when rows * d >= 2**25")
    parser.add_argument("--min-time", type=float, default=0.02, help="seconds per measurement (at least one call)")
    parser.add_argument("--no-torch", action="store_true")
    args = parser.parse_args()

    runtime.set_num_threads(args.threads)
    nt = runtime.get_num_threads()
    torch: Any = None
    torch_note = ""
    if not args.no_torch:
        try:
            import torch  # noqa: PLC0415
        except Exception as exc:  # noqa: BLE001
            torch_note = f"torch columns skipped: not importable ({type(exc).__name__}: {exc})"
    else:
        torch_note = "torch columns skipped (--no-torch)"
    if torch is not None:
        torch.set_num_threads(nt)
    cols = 1 << args.log2_cols
    t_start = time.perf_counter()

    tv = f"torch {torch.__version__}" if torch is not None else "torch absent"
    print(f"dprec {package_version()} count-sketch benchmark (CPU), float32, cols = 2^{args.log2_cols}")
    print(
        f"CPU: {cpu_model()} | ISA: {runtime.get_isa()} | cores: {os.cpu_count()} | threads (dprec, torch): {nt} | "
        f"numpy {np.__version__} | {tv}"
    )
    print(f"caches: {runtime.cache_summary()} (blocking derives from these)")
    print(
        f"median of {args.repeat} ({args.repeat_large} when rows*d >= 2^25) measurements of >= "
        f"{args.min_time * 1e3:g} ms, methods round-robin per row; throughput in M input elements/s = d / time"
    )
    print()

    enc_lines: list[str] = []
    dec_lines: list[str] = []
    worst_agree = 0.0
    enc_ratios: list[tuple[int, int, float, float]] = []
    dec_ratios: list[tuple[int, int, float, float]] = []
    for lg in sorted(set(args.log2_d)):
        d = 1 << lg
        x = np.random.default_rng(lg).standard_normal(d).astype(np.float32)
        xt = torch.from_numpy(x) if torch is not None else None
        for rows in sorted(set(args.rows)):
            cs = CountSketch(d, rows, cols, SEED)
            scale = np.float32(1.0 / rows)
            # Precomputed tables (outside every timed region).
            bpre = np.empty((rows, d), dtype=np.intp)
            spre = np.empty((rows, d), dtype=np.float32)
            for r in range(rows):
                b, neg = otf_buckets_signs(r, d, cols)
                bpre[r] = b
                spre[r] = np.where(neg, np.float32(-1), np.float32(1))
            rix = np.arange(rows)[:, None]

            def enc_dprec() -> np.ndarray:
                return cs.encode(x)

            def enc_np_otf() -> np.ndarray:
                table = np.empty((rows, cols), dtype=np.float32)
                xs = x * scale
                for r in range(rows):
                    b, neg = otf_buckets_signs(r, d, cols)
                    table[r] = np.bincount(b, weights=np.where(neg, -xs, xs), minlength=cols)
                return table

            def enc_np_pre() -> np.ndarray:
                table = np.empty((rows, cols), dtype=np.float32)
                xs = x * scale
                for r in range(rows):
                    table[r] = np.bincount(bpre[r], weights=spre[r] * xs, minlength=cols)
                return table

            methods: list[tuple[str, Callable[[], Any]]] = [
                ("dprec", enc_dprec),
                ("np_otf", enc_np_otf),
                ("np_pre", enc_np_pre),
            ]
            if torch is not None:
                bt = torch.from_numpy(bpre)
                st = torch.from_numpy(spre)

                def enc_torch() -> Any:
                    table = torch.zeros(rows, cols, dtype=torch.float32)
                    xs = xt * float(scale)
                    for r in range(rows):
                        table[r].scatter_add_(0, bt[r], st[r] * xs)
                    return table

                methods.append(("torch", enc_torch))

            tab = enc_dprec()  # the table every decode reads

            def dec_dprec_mean() -> np.ndarray:
                return cs.decode(tab, "mean")

            def dec_dprec_median() -> np.ndarray:
                return cs.decode(tab, "median")

            def dec_np_otf() -> np.ndarray:
                out = np.zeros(d, dtype=np.float32)
                for r in range(rows):
                    b, neg = otf_buckets_signs(r, d, cols)
                    v = tab[r][b]
                    out += np.where(neg, -v, v)
                return out

            def dec_np_pre() -> np.ndarray:
                out = np.zeros(d, dtype=np.float32)
                for r in range(rows):
                    out += tab[r][bpre[r]] * spre[r]
                return out

            def dec_np_median() -> np.ndarray:
                return np.median(tab[rix, bpre] * spre, axis=0) * np.float32(rows)

            dmethods: list[tuple[str, Callable[[], Any]]] = [
                ("mean", dec_dprec_mean),
                ("median", dec_dprec_median),
                ("np_otf", dec_np_otf),
                ("np_pre", dec_np_pre),
                ("np_median", dec_np_median),
            ]
            if torch is not None:
                tabt = torch.from_numpy(tab)

                def dec_torch() -> Any:
                    out = torch.zeros(d, dtype=torch.float32)
                    for r in range(rows):
                        out += tabt[r][bt[r]] * st[r]
                    return out

                dmethods.append(("torch", dec_torch))

            reps = args.repeat_large if rows * d >= (1 << 25) else args.repeat
            med: dict[str, dict[str, float]] = {}
            last: dict[str, dict[str, Any]] = {"enc": {}, "dec": {}}
            for kind, ms in (("enc", methods), ("dec", dmethods)):
                if rows * d >= (1 << 25):  # every method takes well over min_time per call here
                    ks = {name: 1 for name, _ in ms}
                else:
                    ks = {name: calls_per_measurement(fn, args.min_time) for name, fn in ms}
                times: dict[str, list[float]] = {name: [] for name, _ in ms}
                for _ in range(reps):
                    for name, fn in ms:
                        k = ks[name]
                        t0 = time.perf_counter()
                        for _ in range(k):
                            res = fn()
                        times[name].append((time.perf_counter() - t0) / k)
                        last[kind][name] = res
                        if name == "torch":
                            time.sleep(_TORCH_PAUSE_S)
                med[kind] = {name: statistics.median(v) for name, v in times.items()}

            # Agreement, on the outputs of the timed calls: tables and mean decodes against NumPy
            # (precomputed), the median decode against NumPy's median.
            le, ld = last["enc"], last["dec"]
            agree = [rel_l2(np.asarray(le[name]), le["np_pre"]) for name, _ in methods]
            agree += [rel_l2(np.asarray(ld[name]), ld["np_pre"]) for name in ("mean", "np_otf", "torch") if name in ld]
            agree.append(rel_l2(ld["median"], ld["np_median"]))
            worst_agree = max(worst_agree, *agree)

            def rate(t: float | None) -> str:
                return "n/a" if t is None else f"{d / t / 1e6:,.1f}"

            e = med["enc"]
            et = e.get("torch")
            v_otf, v_pre = e["np_otf"] / e["dprec"], e["np_pre"] / e["dprec"]
            enc_ratios.append((lg, rows, v_otf, v_pre))
            vt_text = "n/a" if et is None else f"{et / e['dprec']:.2f}x"
            enc_lines.append(
                f"{'2^' + str(lg):>5} {rows:>4} | {rate(e['dprec']):>8} {rate(e['np_otf']):>9} {rate(e['np_pre']):>9}"
                f" {rate(et):>8} | {v_otf:>7.1f}x {v_pre:>7.1f}x"
                f" {vt_text:>8} | {e['dprec'] * 1e3:>9.2f}"
            )
            dc = med["dec"]
            dt = dc.get("torch")
            dv_otf, dv_pre = dc["np_otf"] / dc["mean"], dc["np_pre"] / dc["mean"]
            dv_med = dc["np_median"] / dc["median"]
            dec_ratios.append((lg, rows, dv_otf, dv_pre))
            dvt_text = "n/a" if dt is None else f"{dt / dc['mean']:.2f}x"
            dec_lines.append(
                f"{'2^' + str(lg):>5} {rows:>4} | {rate(dc['mean']):>8} {rate(dc['median']):>8} {rate(dc['np_otf']):>9}"
                f" {rate(dc['np_pre']):>9} {rate(dc['np_median']):>9} {rate(dt):>8} |"
                f" {dv_otf:>7.1f}x {dv_pre:>7.1f}x {dv_med:>7.1f}x"
                f" {dvt_text:>8}"
            )
            print(f"  done d=2^{lg} rows={rows} ({time.perf_counter() - t_start:.0f}s)", file=sys.stderr, flush=True)

    ok = worst_agree < AGREE_TOL
    print(
        f"agreement (tables and decodes of every method vs NumPy, float64 norms): worst relative L2 "
        f"{worst_agree:.2e} (tolerance {AGREE_TOL:g}) -> {'OK' if ok else 'FAIL'}"
    )
    print()
    print("ENCODE (M input elements/s = d / time; speed-up = other time / dprec time)")
    h = (
        f"{'d':>5} {'rows':>4} | {'dprec':>8} {'NumPy otf':>9} {'NumPy pre':>9} {'torch':>8} |"
        f" {'/np otf':>8} {'/np pre':>8} {'/torch':>8} | {'dprec ms':>9}"
    )
    print(h)
    print("-" * len(h))
    print("\n".join(enc_lines))
    print()
    print("DECODE (M output elements/s = d / time; speed-ups: mean vs NumPy mean, median vs NumPy median)")
    h = (
        f"{'d':>5} {'rows':>4} | {'mean':>8} {'median':>8} {'np mn otf':>9} {'np mn pre':>9} {'np median':>9}"
        f" {'torch mn':>8} | {'/np otf':>8} {'/np pre':>8} {'/np med':>8} {'/torch':>8}"
    )
    print(h)
    print("-" * len(h))
    print("\n".join(dec_lines))
    print()
    print(
        "  otf = buckets and signs from dprec.philox.words inside the timed region; pre = rows x d intp buckets and"
        " float32 signs precomputed (untimed). torch = scatter_add_ (encode) / indexing (decode) on the precomputed"
        " tables, torch.set_num_threads = dprec's."
    )
    if torch_note:
        print("  " + torch_note)
    print()
    print(f"performance target: count-sketch >= {TARGET_VS_NUMPY:g}x NumPy")
    for what, ratios in (("encode", enc_ratios), ("decode mean", dec_ratios)):
        for idx, label in ((2, "on-the-fly NumPy"), (3, "precomputed NumPy")):
            worst = min(ratios, key=lambda r: r[idx])
            best = max(ratios, key=lambda r: r[idx])
            npass = sum(r[idx] >= TARGET_VS_NUMPY for r in ratios)
            print(
                f"  {what:<11} vs {label:<17}: {worst[idx]:5.1f}x .. {best[idx]:5.1f}x "
                f"(worst d=2^{worst[0]} rows={worst[1]}); {npass}/{len(ratios)} cells >= {TARGET_VS_NUMPY:g}x -> "
                f"{'PASS' if npass == len(ratios) else 'MISS'}"
            )
    print(f"total time {time.perf_counter() - t_start:.1f}s")
    return 0 if ok else 2


if __name__ == "__main__":
    sys.exit(main())
