"""The ``dprec`` command line: ``dprec bench`` (throughput table), ``dprec compare`` (every
mechanism trains a model at one epsilon, per threat model), ``dprec demo`` (its quick preset),
``dprec audit`` (an empirical privacy audit) and ``dprec info``.

Also runnable as ``python -m dprec``.
"""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

__all__ = ["main"]


def _info() -> int:
    import platform  # noqa: PLC0415

    import numpy as np  # noqa: PLC0415

    from . import bench  # noqa: PLC0415
    from ._runtime import dispatch as _dispatch
    from ._runtime import native as _native
    from .constants import NORMAL_TRANSFORM_VERSION  # noqa: PLC0415

    print(f"dprec {bench.package_version()} (python {platform.python_version()}, numpy {np.__version__})")
    print(f"normal transform version: {NORMAL_TRANSFORM_VERSION}")
    print(f"backends: {', '.join(_dispatch.available_backends())}")
    if _native.cuda_available():
        from . import cuda  # noqa: PLC0415

        names = ", ".join(cuda.device_name(i) for i in range(cuda.device_count()))
        print(f"CUDA: {names} (runtime {_native.cuda_module().runtime_version()})")
    else:
        print(f"CUDA backend unavailable: {_native.cuda_unavailable_reason()}")
    cuda_targets = _native.cuda_build_architectures()
    if cuda_targets:
        print(f"CUDA kernels built for: {', '.join(cuda_targets)}")
    if _native.native_available():
        from . import runtime  # noqa: PLC0415

        print(f"CPU: {bench.cpu_model()}")
        print(f"ISA: {runtime.get_isa()} (available: {', '.join(runtime.available_isas())})")
        print(f"FWHT kernels: {runtime.fwht_isa()} (float32), {runtime.fwht_isa('float64')} (float64)")
        print(f"threads: {runtime.get_num_threads()}")
        print(f"caches: {runtime.cache_summary()}")
    else:
        try:
            _native.native()
        except RuntimeError as exc:
            print(f"native backend unavailable: {exc}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``dprec`` console script."""
    from . import bench
    from .compare import demo  # noqa: PLC0415

    parser = argparse.ArgumentParser(prog="dprec", description="dprec: DP-REC compression for federated learning.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    p_bench = sub.add_parser(
        "bench",
        help="print this machine's DP-REC encode throughput table and a native-vs-reference agreement check",
        description="DP-REC encode/decode throughput on this machine, against PyTorch and the NumPy reference "
        "(the performance targets marked PASS/MISS), then a native-versus-reference agreement line.",
    )
    bench.add_arguments(p_bench)
    p_demo = sub.add_parser(
        "demo",
        help="the headline in minutes: DP-REC against DP-FedAvg, the local Gaussian and Skellam + SecAgg on digits, "
        "each row saying whom it protects against (a preset of compare; needs dprec[demo])",
        description=demo.DESCRIPTION,
    )
    demo.add_arguments(p_demo)
    from .compare import cli as compare_cli  # noqa: PLC0415

    p_compare = sub.add_parser(
        "compare",
        help="every mechanism trains a model, calibrated to one epsilon against each threat model: accuracy, "
        "epsilon per observer, bytes (needs dprec[demo])",
        description=compare_cli.DESCRIPTION,
    )
    compare_cli.add_arguments(p_compare)
    sub.add_parser("info", help="version, backends, ISA and thread count")
    from . import audit  # noqa: PLC0415

    p_audit = sub.add_parser(
        "audit",
        help="empirical privacy audit: a Clopper-Pearson lower bound on epsilon of a mechanism's real code path "
        "beside its accounted epsilon (needs SciPy)",
        description=audit.DESCRIPTION,
        epilog=audit.EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    audit.add_arguments(p_audit)
    args = parser.parse_args(argv)
    if args.command == "bench":
        bench.run_from_args(args)
        return 0
    if args.command == "demo":
        return demo.run_from_args(args, parser=p_demo)
    if args.command == "compare":
        return compare_cli.run_from_args(args, parser=p_compare)
    if args.command == "info":
        return _info()
    if args.command == "audit":
        return audit.run_from_args(args, parser=p_audit)
    parser.print_help()
    return 2


if __name__ == "__main__":
    sys.exit(main())
