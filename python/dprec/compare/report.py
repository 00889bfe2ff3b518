"""Tables and plots of a :class:`~dprec.compare.runner.CompareResult`."""

from __future__ import annotations

import math
from typing import Optional

import numpy as np

from .runner import CompareResult, FederationResult, PlanResult, RowResult

__all__ = ["OBSERVERS", "format_summary", "format_table", "headline", "write_plots"]

#: Who each threat model's observer is (the table's group headings).
OBSERVERS = {
    "central": "central: a trusted server; the observer sees only the released models",
    "messages": "messages: the observer sees every message, not who sent it",
    "server": "server: the observer sees every message and who sent it (a Flower server)",
}


def _acc(plan: PlanResult) -> str:
    if not plan.runs:
        return "-"
    mean, sd = plan.final_accuracy()
    return f"{100 * mean:5.1f} +- {100 * sd:4.1f}"


def _eps(x: Optional[float]) -> str:
    if x is None:
        return "-"
    if math.isinf(x):
        return "inf"
    return f"{x:.3g}" if x < 1000 else f"{x:.3g}"


def _bytes(n: float) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n:.0f} B"


def _mean(plan: PlanResult, attr: str) -> float:
    return float(np.mean([getattr(r, attr) for r in plan.runs])) if plan.runs else math.nan


def format_federation(fed: FederationResult, *, trust: bool = False) -> str:
    """The table of one federation, grouped by threat model (reasons and notes as numbered footnotes)."""
    lines = [
        f"== {fed.name}: {fed.description}",
        f"   N = {fed.num_clients:,} clients, B = {fed.clients_per_round} per round (Poisson, q = "
        f"{fed.clients_per_round / fed.num_clients:.3g}; DP-REC 'with replacement' draws B), T = {fed.rounds} rounds, "
        f"delta = {fed.delta:.3g}, {fed.dim:,} parameters ({fed.float_bytes:,} bytes as float32)",
        f"   rule: {fed.rule}",
    ]
    runs = max((len(p.runs) for p in fed.plans), default=0)
    head = (f"   {'mechanism':<58} {'test acc % (' + str(runs) + ' runs)':>20} {'epsilon':>8} {'local eps':>9} "
            f"{'B/message':>10} {'total up':>10} {'s/run':>6}")
    notes: list[str] = []
    for tm in dict.fromkeys(r.threat_model for r in fed.rows):
        lines.append("")
        lines.append(f"-- against {OBSERVERS[tm]}")
        lines.append(head)
        for row in (r for r in fed.rows if r.threat_model == tm):
            plan = fed.plans[row.plan] if row.plan >= 0 else PlanResult(row.mechanism, row.label, {}, "", [])
            mark = ""
            if row.mechanism != "fedavg" and not row.calibrated:
                mark = "*"
            for text in (row.reason, row.note):
                if text:
                    if text not in notes:
                        notes.append(text)
                    mark += f"[{notes.index(text) + 1}]"
            label = row.label + (" [per example]" if row.unit == "example" else "")
            trained = bool(plan.runs)
            size = f"{plan.runs[0].message_bytes:,}" if trained else "-"
            total = _bytes(_mean(plan, "total_bytes")) if trained else "-"
            wall = f"{_mean(plan, 'wall_s'):.1f}" if trained else "-"
            lines.append(
                f"   {label + ' ' + mark:<58} {_acc(plan):>20} {_eps(row.epsilon):>8} {_eps(row.local_epsilon):>9} "
                f"{size:>10} {total:>10} {wall:>6}"
            )
            if trust:
                lines.append(f"   {'':<4}trust: {row.trust}")
    lines.append("")
    lines.append("   * no guarantee at the target against this observer: the accuracy is that of the parameters "
                 "calibrated for another observer (or by the paper's accounting), and epsilon is what they give here")
    for i, text in enumerate(notes, 1):
        lines.append(f"   [{i}] {text}")
    lines.append("   parameters: " + "; ".join(f"{p.label}: {p.description}" for p in fed.plans if p.params))
    return "\n".join(lines)


def format_summary(fed: FederationResult, *, trust: bool = True) -> str:
    """One row per trained configuration: accuracy, bytes, and its epsilon against EVERY observer side by side.

    A row's parameters were calibrated to the target against the observers marked ``=``; against the
    others its epsilon is what those parameters give (``inf`` where nothing is proved)."""
    tms = list(dict.fromkeys(r.threat_model for r in fed.rows))
    runs = max((len(p.runs) for p in fed.plans), default=0)
    head = (f"   {'mechanism':<58} {'test acc % (' + str(runs) + ' runs)':>20} "
            + " ".join(f"{'eps ' + tm:>12}" for tm in tms) + f" {'B/message':>10}")
    lines = [f"== {fed.name}: each configuration against every observer ('=': calibrated to the target there)", head]
    by_plan: dict[int, dict[str, RowResult]] = {}
    for row in fed.rows:
        if row.plan >= 0:
            by_plan.setdefault(row.plan, {})[row.threat_model] = row
    for i, plan in enumerate(fed.plans):
        rows = by_plan.get(i, {})
        if not rows or not plan.runs:
            continue
        eps = []
        for tm in tms:
            row = rows.get(tm)
            value = plan.epsilons.get(tm, row.epsilon if row else math.inf) if plan.params else math.inf
            eps.append(("=" if tm in plan.calibrated_for else "") + _eps(value))
        first = next(iter(rows.values()))
        label = plan.label + (" [per example]" if first.unit == "example" else "")
        lines.append(f"   {label:<58} {_acc(plan):>20} " + " ".join(f"{e:>12}" for e in eps)
                     + f" {plan.runs[0].message_bytes:>10,}")
        if trust:
            lines.append(f"   {'':<4}trust: {first.trust}")
    return "\n".join(lines)


def format_table(result: CompareResult, *, trust: bool = False) -> str:
    """Every federation's table, then the configuration line a rerun needs."""
    cfg = result.config
    parts = [format_federation(f, trust=trust) for f in result.federations]
    parts += [format_summary(f, trust=False) for f in result.federations]
    parts.append(
        f"target epsilon {cfg.epsilon:g} for every mechanism and observer (relation: one client's update replaced by "
        f"zero; joint noise: one example's gradient); accuracy is mean +- sd over {cfg.runs} runs (seed {cfg.seed}; "
        "private noise from the OS entropy source)"
    )
    parts.append(f"machine: {result.machine}; total {result.elapsed_s:.0f} s")
    return "\n\n".join(parts)


def _curves(plan: PlanResult) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    rounds = np.asarray(plan.runs[0].eval_rounds, dtype=float)
    acc = 100.0 * np.array([r.accuracy for r in plan.runs])
    up = np.array([r.bytes_uploaded for r in plan.runs], dtype=float).mean(axis=0)
    sd = acc.std(axis=0, ddof=1) if acc.shape[0] > 1 else np.zeros(acc.shape[1])
    return rounds, up, acc.mean(axis=0), sd


def write_plots(result: CompareResult, prefix: str) -> list[str]:
    """One PNG per federation, ``<prefix>-<federation>.png``: for every threat model, test accuracy
    against rounds and against total bytes uploaded (log scale), mean over runs with a band of
    +- one standard deviation, for the mechanisms calibrated against that observer (FedAvg dashed,
    for reference). Returns the paths. matplotlib's object API (no pyplot, no global state)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: PLC0415 - optional dependency
    from matplotlib.figure import Figure  # noqa: PLC0415

    if prefix.endswith(".png"):
        prefix = prefix[:-4]
    paths = []
    for fed in result.federations:
        tms = list(dict.fromkeys(r.threat_model for r in fed.rows))
        fig = Figure(figsize=(17.0, 3.6 * len(tms)), dpi=90)
        FigureCanvasAgg(fig)
        # One colour per mechanism (tab20 has 20 distinct ones; the registry has 12), sketch variants dotted.
        from matplotlib import colormaps  # noqa: PLC0415

        from .mechanisms import MECHANISMS  # noqa: PLC0415

        palette = colormaps["tab20"]
        colors = {key: palette((2 * i) % 20 + (2 * i) // 20) for i, key in enumerate(MECHANISMS)}
        for t, tm in enumerate(tms):
            ax_r = fig.add_subplot(len(tms), 2, 2 * t + 1)
            ax_b = fig.add_subplot(len(tms), 2, 2 * t + 2)
            for row in (r for r in fed.rows if r.threat_model == tm):
                if row.plan < 0 or not fed.plans[row.plan].runs:
                    continue
                plan = fed.plans[row.plan]
                if not plan.runs:
                    continue
                reference = row.mechanism == "fedavg"
                if not reference and not (row.calibrated and math.isfinite(row.epsilon)):
                    continue
                rounds, up, mean, sd = _curves(plan)
                style = dict(color="0.4", ls="--") if reference else dict(
                    color=colors[plan.mechanism], ls=":" if plan.mechanism.endswith("sketch") else "-")
                per_example = " [per example]" if row.unit == "example" else ""
                label = f"{plan.label}{per_example} ({plan.runs[0].message_bytes:,} B/msg)"
                # The bytes panel starts at the first evaluation after round 0 (no bytes yet: log scale).
                for ax, x, sl in ((ax_r, rounds, slice(None)), (ax_b, up, slice(1, None))):
                    ax.plot(x[sl], mean[sl], label=label, lw=1.4, **style)
                    ax.fill_between(x[sl], (mean - sd)[sl], (mean + sd)[sl], alpha=0.15, color=style["color"])
            for ax in (ax_r, ax_b):
                ax.set_ylim(0, 100)
                ax.grid(True, alpha=0.3)
                ax.set_ylabel("test accuracy (%)")
            ax_b.set_xscale("log")
            ax_r.set_xlabel("round")
            ax_b.set_xlabel("total bytes uploaded by all clients")
            ax_r.set_title(f"{fed.name}: against {OBSERVERS[tm]}", fontsize=9, loc="left")
            ax_b.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.02, 0.5))  # beside the curves, not on them
        fig.suptitle(
            f"{fed.name}: every mechanism at epsilon {result.config.epsilon:g}, delta {fed.delta:.2g} against the "
            f"observer of each row (mean +- sd over {result.config.runs} runs)",
            fontsize=10,
        )
        fig.tight_layout()
        path = f"{prefix}-{fed.name}.png"
        fig.savefig(path, format="png")
        paths.append(path)
    return paths


def headline(result: CompareResult) -> list[str]:
    """One sentence per federation: what DP-REC buys and costs against the server."""
    out = []
    for fed in result.federations:
        rows = {(r.threat_model, r.mechanism): r for r in fed.rows}
        rec = rows.get(("server", "dp-rec"))
        base = rows.get(("central", "dp-fedavg"))
        fedavg = rows.get(("server", "fedavg")) or rows.get(("central", "fedavg"))
        if rec is None or base is None or fedavg is None:
            continue
        if not (rec.calibrated and math.isfinite(rec.epsilon) and base.calibrated):
            continue
        if min(rec.plan, base.plan, fedavg.plan) < 0:
            continue
        pr, pb, pf = fed.plans[rec.plan], fed.plans[base.plan], fed.plans[fedavg.plan]
        if not (pr.runs and pb.runs and pf.runs):
            continue
        ratio = pb.runs[0].message_bytes / max(1, pr.runs[0].message_bytes)
        out.append(
            f"{fed.name}: DP-REC sends {pr.runs[0].message_bytes} bytes per message ({ratio:.0f}x fewer than float32) "
            f"and is private against the server itself (epsilon {_eps(rec.epsilon)}), at "
            f"{100 * pr.final_accuracy()[0]:.1f}% test accuracy; DP-FedAvg reaches {100 * pb.final_accuracy()[0]:.1f}% "
            f"at the same epsilon only if the server is trusted (against the server: inf); FedAvg "
            f"{100 * pf.final_accuracy()[0]:.1f}% with no privacy"
        )
    return out
