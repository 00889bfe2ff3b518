"""``dprec compare`` and ``dprec demo`` (the demo is a preset of the comparison)."""

from __future__ import annotations

import argparse
import importlib
import json
import math
import sys
from typing import Any, Optional, Sequence, TextIO

from .mechanisms import MECHANISMS, THREAT_MODELS
from .report import format_federation, format_summary, format_table, headline, write_plots
from .runner import FEDERATION_DEFAULTS, QUICK_ROUNDS, CompareConfig, CompareResult, run_compare

__all__ = ["DEMO_MECHANISMS", "DESCRIPTION", "add_arguments", "main", "missing_requirements", "run_from_args"]

#: What the comparison needs beyond NumPy (``pip install "dprec[demo]"``): import name -> pip name.
REQUIREMENTS = {"scipy": "scipy", "sklearn": "scikit-learn", "matplotlib": "matplotlib", "tqdm": "tqdm"}
#: ``dprec demo``'s mechanisms: DP-REC against what it compresses, against the trusted-server baseline,
#: and against secure aggregation (the other way not to trust the server).
DEMO_MECHANISMS = ("fedavg", "dp-fedavg", "dp-rec", "local-gaussian", "skellam-sketch")
DEMO_QUICK_ROUNDS = 100
DEMO_QUICK_RUNS = 2

DESCRIPTION = """\
Train the same model on the same federated split with every mechanism, each calibrated by dprec's own
accountant to the same target epsilon and delta against each observer (threat model) it has a guarantee
for, and print a table grouped by threat model: test accuracy (mean +- sd over --runs; private noise from
the OS), epsilon against that observer (inf with the reason where nothing is proved), the local epsilon
of one message, bytes per message, total bytes uploaded and seconds per run. --plot writes accuracy
against rounds and against total bytes (log scale) per federation; --json everything, with the exact
configuration. Needs NumPy, SciPy and scikit-learn (pip install "dprec[demo]"); no PyTorch."""

DEMO_DESCRIPTION = """\
The honest headline in a few minutes: on scikit-learn's digits (100 clients), DP-REC against what it
compresses (the local Gaussian, float32), against DP-FedAvg (a trusted server adds the noise) and against
Skellam noise under secure aggregation with a count-sketch, all at the same epsilon, each row saying whom
it protects against and who must be trusted. A preset of `dprec compare` (see `dprec compare --help`):
--quick runs 100 rounds twice (under a minute on 2 cores), the default 300 rounds three times."""


def missing_requirements(plot: bool, federations: Sequence[str]) -> list[str]:
    """pip names of the optional packages this run needs but cannot import."""
    need = ["scipy"]
    if "digits" in federations:
        need.append("sklearn")
    if plot:
        need.append("matplotlib")
    missing = []
    for module in need:
        try:
            importlib.import_module(module)
        except ImportError:
            missing.append(REQUIREMENTS[module])
    return missing


def _positive_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from None
    if not (v > 0.0 and math.isfinite(v)):
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text}")
    return v


def _count(minimum: int):
    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if v < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {v}")
        return v

    return parse


def _delta(text: str) -> float:
    v = _positive_float(text)
    if v >= 1.0:
        raise argparse.ArgumentTypeError(f"must be in (0, 1), got {text}")
    return v


def add_arguments(p: argparse.ArgumentParser, *, demo: bool = False) -> None:
    """``dprec compare``'s options (``demo=True``: the demo's, a subset with its own defaults)."""
    if not demo:
        p.add_argument("--federation", nargs="+", choices=tuple(FEDERATION_DEFAULTS), default=None,
                       help="which federations (default: both): digits (100 clients, Dirichlet(0.5) label split, a "
                       "64-32-10 MLP) and synthetic (10,000 clients, softmax regression)")
        p.add_argument("--mechanism", nargs="+", choices=MECHANISMS, default=None,
                       help="which mechanisms (default: all but the Flower SecAgg+ rows ddg-flower and skellam-flower, "
                            "run only when named)")
        p.add_argument("--threat-model", nargs="+", choices=THREAT_MODELS, default=None,
                       help="which observers to calibrate for and report (default: all three)")
        p.add_argument("--clients", type=_count(1), default=None, help="clients N (default: per federation)")
        p.add_argument("--clients-per-round", type=_count(1), default=None,
                       help="expected clients per round B, q = B/N (default: per federation)")
        p.add_argument("--eval-every", type=_count(1), default=None, help="test accuracy every k rounds")
        p.add_argument("--workers", type=_count(0), default=0, help="processes (default 0: every core)")
        p.add_argument("--load", default=None, metavar="JSON",
                       help="print (and plot) a saved --json result instead of running")
        p.add_argument("--trust", action="store_true", help="a line per row saying who must be trusted")
    p.add_argument("--quick", action="store_true",
                   help="few rounds (demo: 100 rounds, 2 runs; compare: " +
                   ", ".join(f"{k} {v}" for k, v in QUICK_ROUNDS.items()) + " rounds): a smoke run")
    p.add_argument("--epsilon", type=_positive_float, default=6.0, help="target epsilon (default 6)")
    p.add_argument("--delta", type=_delta, default=None, help="target delta (default N^-1.1, the DP-REC paper's)")
    p.add_argument("--runs", type=_count(1), default=None, help="training runs per calibration (default 3)")
    p.add_argument("--rounds", type=_count(1), default=None, help="rounds T (default: per federation)")
    p.add_argument("--clip", type=_positive_float, default=1.0, help="L2 clip norm C of every mechanism (default 1)")
    p.add_argument("--server-lr", type=_positive_float, default=1.0,
                   help="server learning rate of every mechanism (default 1)")
    p.add_argument("--local-epochs", type=_count(1), default=2, help="local epochs per round (default 2)")
    p.add_argument("--local-lr", type=_positive_float, default=0.1, help="local SGD learning rate (default 0.1)")
    p.add_argument("--batch-size", type=_count(1), default=16, help="local minibatch size (default 16)")
    p.add_argument("--alpha", type=_positive_float, default=0.5, help="Dirichlet concentration of digits' split")
    p.add_argument("--seed", type=_count(0), default=0, help="seed of the data split, the initial models and the SecAgg round seeds (default 0); the client "
                   "sampling and minibatch order come from a per-run secret (OS entropy), as amplification needs")
    p.add_argument("--plot", default=None, metavar="PREFIX", help="write PREFIX-<federation>.png")
    p.add_argument("--json", default=None, metavar="PATH", help="write every number and the configuration as JSON")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")


def config_from_args(args: argparse.Namespace, *, demo: bool = False) -> CompareConfig:
    runs = args.runs if args.runs is not None else (DEMO_QUICK_RUNS if demo and args.quick else 3)
    rounds = args.rounds
    if demo and rounds is None and args.quick:
        rounds = DEMO_QUICK_ROUNDS
    common: dict[str, Any] = dict(
        epsilon=args.epsilon, delta=args.delta, runs=runs, rounds=rounds, clip=args.clip, server_lr=args.server_lr,
        local_epochs=args.local_epochs, local_lr=args.local_lr, batch_size=args.batch_size, alpha=args.alpha,
        seed=args.seed, quick=args.quick,
    )
    if demo:
        return CompareConfig(federations=("digits",), mechanisms=DEMO_MECHANISMS, **common)
    return CompareConfig(
        federations=tuple(args.federation) if args.federation else tuple(FEDERATION_DEFAULTS),
        mechanisms=tuple(args.mechanism) if args.mechanism else (),
        threat_models=tuple(args.threat_model) if args.threat_model else THREAT_MODELS,
        clients=args.clients, clients_per_round=args.clients_per_round, eval_every=args.eval_every,
        workers=args.workers, **common,
    )


def _progress_bar(enabled: bool, stream: TextIO) -> tuple[Any, Any]:
    if not enabled:
        return None, None
    try:
        isatty = stream.isatty()
    except Exception:  # noqa: BLE001 - a stream without isatty is not a terminal
        isatty = False
    if not isatty:
        return None, None
    try:
        from tqdm import tqdm  # noqa: PLC0415 - optional
    except ImportError:
        return None, None
    bar = tqdm(total=0, file=stream, unit="run", desc="dprec compare", dynamic_ncols=True, leave=False)

    def update(done: int, total: int, what: str) -> None:
        bar.total = total
        bar.n = done
        bar.set_postfix_str(what[:60], refresh=False)
        bar.refresh()

    return bar, update


def run_from_args(args: argparse.Namespace, out: Optional[TextIO] = None,
                  parser: Optional[argparse.ArgumentParser] = None, *, demo: bool = False) -> int:
    """Run ``dprec compare`` (or ``dprec demo``) for parsed arguments; print to ``out``. The exit code."""
    out = out if out is not None else sys.stdout
    prog = "dprec demo" if demo else "dprec compare"
    load = getattr(args, "load", None)
    if load:
        try:
            with open(load, encoding="utf-8") as f:
                result = CompareResult.from_dict(json.load(f))
        except (OSError, ValueError) as exc:  # unreadable, not JSON, or not a compare result
            print(f"{prog}: error: --load {load}: {exc}", file=sys.stderr)
            return 2
    else:
        try:
            cfg = config_from_args(args, demo=demo)
            cfg.validate()
        except (TypeError, ValueError) as exc:
            if parser is not None:
                parser.error(str(exc))
            print(f"{prog}: error: {exc}", file=sys.stderr)
            return 2
        missing = missing_requirements(args.plot is not None, cfg.federations)
        if missing:
            print(f"{prog} needs {', '.join(missing)} (not installed): pip install \"dprec[demo]\"", file=sys.stderr)
            return 2
        bar, update = _progress_bar(not args.no_progress, sys.stderr)
        try:
            result = run_compare(cfg, progress=update)
        finally:
            if bar is not None:
                bar.close()
    if demo:  # the compact view: every observer side by side, who must be trusted, then the headline
        for fed in result.federations:
            print(format_federation(fed, trust=False).split("\n\n-- against")[0], file=out)
            print(format_summary(fed, trust=True), file=out)
            print(_footnotes(fed), file=out)
        for line in headline(result):
            print(f"\n{line}", file=out)
    else:
        print(format_table(result, trust=getattr(args, "trust", False)), file=out)
    if args.plot:
        if missing_requirements(True, ()):
            print(f"{prog}: --plot needs matplotlib: pip install \"dprec[demo]\"", file=sys.stderr)
            return 2
        for path in write_plots(result, args.plot):
            print(f"plot written to {path}", file=out)
    if getattr(args, "json", None) and not load:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(result.as_dict(), f, indent=1)
        print(f"JSON written to {args.json}", file=out)
    return 0


def _footnotes(fed: Any) -> str:
    """The reasons behind every infinite epsilon of ``fed``, once each."""
    seen: list[str] = []
    for row in fed.rows:
        if math.isinf(row.epsilon) and row.reason and row.mechanism != "fedavg":
            text = f"   {row.label} against {row.threat_model}: {row.reason}"
            if text not in seen:
                seen.append(text)
    return "\n".join(["   where epsilon is inf:"] + seen) if seen else ""


def main(argv: Optional[Sequence[str]] = None, *, demo: bool = False) -> int:
    """``python -m dprec.compare.cli``: the same as ``dprec compare`` (``demo=True``: ``dprec demo``)."""
    p = argparse.ArgumentParser(prog="dprec demo" if demo else "dprec compare",
                                description=DEMO_DESCRIPTION if demo else DESCRIPTION)
    add_arguments(p, demo=demo)
    return run_from_args(p.parse_args(argv), parser=p, demo=demo)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
