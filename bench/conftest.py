"""pytest-benchmark harness for the CPU performance targets: ``pytest bench/ --benchmark-only``.

Every row of the performance targets that runs on a CPU is a group of benchmarks (``bench/test_spec_targets.py``):
dprec's method and its anchors (PyTorch, NumPy, FFHT, generating the same normals) are timed in
the same run by pytest-benchmark, each as its own benchmark, and at the end of the session this
file prints the side-by-side tables the bench scripts print (rates, ratios against the anchors)
and checks every ratio against its target: a missed target is printed as ``MISS`` and makes
the session fail, unless ``--no-target-check`` is given. ``--benchmark-json FILE`` (a
pytest-benchmark option) saves every timing for history; ``--benchmark-disable`` runs each body
once without timing (a smoke test; no table, no check), and ``--dprec-quick`` shrinks every size.

Timings are medians of pytest-benchmark rounds. Anchors are not interleaved with dprec's method
(pytest-benchmark times one benchmark after the other), so on a shared machine run the session
twice or use the scripts (``python bench/bench_*.py``), which interleave, to confirm a MISS.

This is benchmarking, not testing: the test suite (``tests/``) has no timing assertion, and
``python -m pytest`` does not collect ``bench/`` (``testpaths = ["tests"]``).
"""

from __future__ import annotations

import platform
from dataclasses import dataclass, field
from typing import Any, Callable

import pytest

from dprec import runtime
from dprec.bench import cpu_model, package_version


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("dprec", "dprec performance benchmarks")
    group.addoption("--dprec-quick", action="store_true", help="small sizes (a smoke run; targets not meaningful)")
    group.addoption("--no-target-check", action="store_true", help="print missed targets but do not fail")


@dataclass
class Measurement:
    seconds: float  # median seconds per call
    work: float  # items per call (elements, candidate-elements, ...), for the rate column
    unit: str


@dataclass
class Target:
    group: str
    label: str  # what the target says, e.g. ">= 6x PyTorch"
    ratio: Callable[[dict[str, Measurement]], float | None]  # None: an anchor is missing
    minimum: float | None = None  # the ratio must be >= minimum ...
    maximum: float | None = None  # ... or <= maximum
    unit: str = "x"  # how the value prints: a ratio ("x") or seconds ("s")


@dataclass
class Results:
    groups: dict[str, dict[str, Measurement]] = field(default_factory=dict)
    targets: list[Target] = field(default_factory=list)
    notes: dict[str, str] = field(default_factory=dict)


RESULTS = Results()


def speedup(slow: str, fast: str) -> Callable[[dict[str, Measurement]], float | None]:
    """``time(slow) / time(fast)`` per unit of work (higher is better for ``fast``)."""

    def f(m: dict[str, Measurement]) -> float | None:
        if slow not in m or fast not in m:
            return None
        return (m[slow].seconds / m[slow].work) / (m[fast].seconds / m[fast].work)

    return f


def overhead(method: str, anchor: str) -> Callable[[dict[str, Measurement]], float | None]:
    """``time(method) / time(anchor)`` per unit of work (lower is better for ``method``)."""
    return speedup(method, anchor)


def add_target(target: Target) -> None:
    if not any(t.group == target.group and t.label == target.label for t in RESULTS.targets):
        RESULTS.targets.append(target)


@pytest.fixture
def threads() -> Any:
    """Set dprec's thread count for one benchmark (restored afterwards)."""
    before = runtime.get_num_threads()
    yield runtime.set_num_threads
    runtime.set_num_threads(before)


@pytest.fixture
def quick(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--dprec-quick"))


@pytest.fixture
def measure(benchmark: Any) -> Callable[..., Any]:
    """``measure(group, name, fn, work, unit, rounds=5)``: benchmark ``fn`` under pytest-benchmark
    and record its median for the tables; returns ``fn``'s last result."""

    def run(group: str, name: str, fn: Callable[[], Any], work: float, unit: str, rounds: int = 5) -> Any:
        benchmark.group = group
        benchmark.name = f"{group}: {name}"
        benchmark.extra_info.update(work=work, unit=unit)
        result = benchmark.pedantic(fn, rounds=rounds, iterations=1, warmup_rounds=1)
        stats = getattr(benchmark, "stats", None)
        if stats is not None and getattr(stats, "stats", None) is not None:  # None with --benchmark-disable
            RESULTS.groups.setdefault(group, {})[name] = Measurement(stats.stats.median, work, unit)
        return result

    return run


def _rate(m: Measurement) -> str:
    r = m.work / m.seconds
    for scale, prefix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if r >= scale:
            return f"{r / scale:,.2f} {prefix}{m.unit}/s"
    return f"{r:,.2f} {m.unit}/s"


def _check(t: Target, value: float | None) -> str:
    if value is None:
        return "n/a (anchor missing)"
    ok = (t.minimum is None or value >= t.minimum) and (t.maximum is None or value <= t.maximum)
    return "ok" if ok else "MISS"


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    if not RESULTS.groups:
        return
    tr = terminalreporter
    tr.section("dprec CPU performance targets")
    tr.write_line(f"dprec {package_version()} on {cpu_model()} ({platform.machine()}), ISA {runtime.get_isa()}, "
                  f"{runtime.get_num_threads()} threads by default")
    for group, methods in RESULTS.groups.items():
        tr.write_line("")
        tr.write_line(f"### {group}")
        width = max(len(n) for n in methods)
        for name, m in methods.items():
            tr.write_line(f"  {name:<{width}}  {m.seconds * 1e3:12.4f} ms  {_rate(m):>22}")
        if group in RESULTS.notes:
            tr.write_line(f"  note: {RESULTS.notes[group]}")
        for t in RESULTS.targets:
            if t.group == group:
                value = t.ratio(methods)
                shown = "n/a" if value is None else f"{value:.3g} s" if t.unit == "s" else f"{value:.2f}x"
                tr.write_line(f"  target {t.label}: {shown} -> {_check(t, value)}")
    missed = _missed()
    tr.write_line("")
    tr.write_line(f"targets: {len(missed)} missed" + (": " + "; ".join(f"{t.group} {t.label}" for t in missed) if missed else ""))


def _missed() -> list[Target]:
    return [t for t in RESULTS.targets if t.group in RESULTS.groups and _check(t, t.ratio(RESULTS.groups[t.group])) == "MISS"]


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    # Runs before the terminal summary prints the tables; a missed target fails the session.
    if _missed() and not session.config.getoption("--no-target-check") and exitstatus == 0:
        session.exitstatus = 1
