"""``dprec demo``: a preset of ``dprec compare`` (see :mod:`dprec.compare`) that shows the headline.

On scikit-learn's digits (100 clients, Dirichlet(0.5) label split, a NumPy 64-32-10 MLP), at one
target epsilon: FedAvg (no privacy), DP-FedAvg (a trusted server adds the noise), DP-REC (each
message private against the server itself, 37 bytes), the local Gaussian DP-REC compresses
(float32) and Skellam noise under secure aggregation with a count-sketch. Every row names the
observer its epsilon holds against and who must be trusted. ``--quick``: 100 rounds, 2 runs.
"""

from __future__ import annotations

import argparse
import sys
from typing import Optional, Sequence, TextIO

from . import cli as _cli

__all__ = ["DEMO_MECHANISMS", "DESCRIPTION", "add_arguments", "main", "run_from_args"]

DESCRIPTION = _cli.DEMO_DESCRIPTION
DEMO_MECHANISMS = _cli.DEMO_MECHANISMS


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Add ``dprec demo``'s options to ``p``."""
    _cli.add_arguments(p, demo=True)


def run_from_args(args: argparse.Namespace, out: Optional[TextIO] = None,
                  parser: Optional[argparse.ArgumentParser] = None) -> int:
    """Run ``dprec demo`` for parsed arguments; the exit code."""
    return _cli.run_from_args(args, out, parser, demo=True)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``python -m dprec.compare.demo``: the same as ``dprec demo``."""
    return _cli.main(argv, demo=True)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
