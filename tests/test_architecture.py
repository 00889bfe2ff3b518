"""The layering of the docs' Architecture page, checked on the source and on real calls: who may
import whom, no import circles, calls that only go down the layers, and the three backends offering
the same operations with the same signatures."""

from __future__ import annotations

import ast
import inspect
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import dprec
from dprec._runtime import backends as _backends
from tests import fake_cuda as fc
from tests.fake_cuda import FakeGpuArray

fake_cuda = fc.fake_cuda  # the fixture, for pytest to find in this module

PACKAGE = Path(dprec.__file__).resolve().parent
COMPILED = {"dprec._core", "dprec._cuda", "dprec._gpu_emulation"}

#: Each unit (a package, or a top-level module) and its level: an import or a call from one unit into
#: another must go to a strictly lower level. Applications over mechanisms over transforms over the
#: public runtime modules and accounting over the private runtime over the pure-NumPy reference.
LEVELS = {
    "dprec": 8,
    "dprec.__main__": 8,
    "dprec.compare": 7,
    "dprec.audit": 6,
    "dprec.bench": 6,
    "dprec.torch": 6,
    "dprec.flower": 6,
    "dprec.rec": 5,
    "dprec.qmgeo": 5,
    "dprec.secagg": 5,
    "dprec.transforms": 4,
    "dprec.philox": 3,
    "dprec.accounting": 3,
    "dprec.cuda": 3,
    "dprec.runtime": 3,
    "dprec._runtime": 2,
    "dprec.reference": 1,
    "dprec.constants": 0,
    "dprec._version": 0,
    "dprec._compat": 0,
    **{m: 0 for m in COMPILED},
}

#: Inside a unit: each module's rank; an import or call between two modules of the unit goes to a
#: strictly lower rank (a package's ``__init__`` re-exports, so it ranks above all its modules).
RANKS = {
    "dprec._runtime": {
        "updates": 7, "arrays": 6, "dispatch": 5, "backends": 4, "array_view": 3, "frameworks": 2,
        "device_array": 2, "native": 1, "validation": 0, "wire": 0,
    },
    "dprec.rec": {"codec": 2, "kernels": 1, "message": 0},
    "dprec.qmgeo": {"codec": 1, "quantizer": 0},
    "dprec.secagg": {"pipeline": 2, "noise": 1, "rounding": 1, "modular": 1},
    "dprec.transforms": {"hadamard": 0, "sketch": 0},
    "dprec.flower": {
        "_secagg_strategy": 3, "_legacy": 2, "_strategy": 1, "_mod": 1, "_secagg_mod": 1, "_adaptive": 0,
        "_common": 0, "_secagg": 0, "_inprocess": 1,
    },
}


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
KNOWN = set(MODULES) | COMPILED


def _resolve(name: str) -> str:
    """The module ``name`` denotes: itself, or the module that defines the attribute it names."""
    while name not in KNOWN and "." in name:
        name = name.rsplit(".", 1)[0]
    return name


def _imports(path: Path) -> set[str]:
    """Every dprec module ``path`` imports, at any depth of the file (lazy imports and those for type
    checkers included): ``from a import b`` is an import of the module ``a.b`` when there is one, else of
    ``a``. ``importlib.import_module`` is not seen (``_compat`` and ``secagg``'s lazy pipeline use it)."""
    here = _module_name(path)
    package = here if path.name == "__init__.py" else here.rsplit(".", 1)[0]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(_resolve(a.name) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            found.update(_resolve(f"{base}.{a.name}") for a in node.names)
    return {m for m in found if (m == "dprec" or m.startswith("dprec.")) and m != here}


GRAPH = {m: _imports(p) for m, p in MODULES.items()}


def _unit(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 1 and (PACKAGE / parts[1]).is_dir() else module


def _rank(module: str) -> float:
    """A module's rank inside its unit (a package's ``__init__``: above every module of it)."""
    unit = _unit(module)
    if module == unit:
        return float("inf")
    return RANKS.get(unit, {}).get(module[len(unit) + 1 :].split(".")[0], 0)


def _goes_down(a: str, b: str) -> bool:
    ua, ub = _unit(a), _unit(b)
    if ua != ub:
        return LEVELS[ub] < LEVELS[ua]
    if ua not in RANKS or a == b:
        return True
    if a.split(".")[:3] == b.split(".")[:3] and len(a.split(".")) >= 3 and len(b.split(".")) >= 3:
        return True  # within one subpackage (the backends): no circles is all that is asked there
    return _rank(b) < _rank(a)


def test_every_unit_has_a_level():
    missing = sorted({_unit(m) for m in KNOWN} - set(LEVELS))
    assert not missing, f"place these in LEVELS (and in the Architecture page): {missing}"
    for unit, ranks in RANKS.items():
        modules = {m[len(unit) + 1 :].split(".")[0] for m in MODULES if m.startswith(unit + ".")}
        assert modules == set(ranks), (unit, sorted(modules ^ set(ranks)))


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_import_graph_sees_imports():
    # Negative controls for the static checks: the graph is not empty, and an upward import is caught.
    assert {"dprec.rec.kernels", "dprec.rec.message", "dprec._runtime.updates"} <= GRAPH["dprec.rec.codec"]
    assert "dprec._runtime.array_view" in GRAPH["dprec._runtime.dispatch"]  # a type-only import counts too
    assert not _goes_down("dprec._runtime.wire", "dprec.rec.codec")
    assert not _goes_down("dprec.rec.kernels", "dprec.rec.codec")
    assert not _goes_down("dprec.rec.codec", "dprec.qmgeo.codec")  # no mechanism imports another


def test_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_circles_between_modules():
    assert _cycles(GRAPH) == []


def test_no_import_circles_between_packages():
    units: dict[str, set[str]] = {}
    for a, outs in GRAPH.items():
        units.setdefault(_unit(a), set()).update(_unit(b) for b in outs if _unit(b) != _unit(a))
    assert _cycles(units) == []


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_go_down_the_layers(module):
    up = sorted(b for b in GRAPH[module] if not _goes_down(module, b))
    assert not up, f"{module} imports {up}, which are not beneath it"


@pytest.mark.parametrize("module", sorted(m for m in MODULES if _unit(m) == "dprec.reference"))
def test_reference_imports_nothing_but_constants(module):
    bad = {m for m in GRAPH[module] if _unit(m) not in ("dprec.constants", "dprec.reference")}
    assert not bad, f"{module} imports {sorted(bad)}"


@pytest.mark.parametrize("module", sorted(m for m in MODULES if _unit(m) == "dprec.accounting"))
def test_accounting_needs_no_kernels(module):
    bad = {m for m in GRAPH[module] if _unit(m) != "dprec.accounting" and m != "dprec.constants"}
    assert not bad, f"{module} imports {sorted(bad)}"


def test_reference_backend_never_imports_a_compiled_module():
    path = PACKAGE / "_runtime" / "backends" / "reference.py"
    bad = GRAPH[_module_name(path)] & (COMPILED | {"dprec._runtime.native"})
    assert not bad, sorted(bad)


NATIVE_ACCESS = COMPILED | {"dprec._runtime.native", "dprec._runtime.backends"} | {
    m for m in MODULES if m.startswith("dprec._runtime.backends.")
}


@pytest.mark.parametrize("module", sorted(m for m in MODULES if _unit(m) in ("dprec.rec", "dprec.qmgeo", "dprec.secagg",
                                                                          "dprec.transforms", "dprec.philox")))
def test_mechanisms_reach_kernels_only_through_dispatch(module):
    bad = GRAPH[module] & NATIVE_ACCESS
    assert not bad, f"{module} imports {sorted(bad)}"


@pytest.mark.parametrize("module", ["dprec.rec.message", "dprec._runtime.wire"])
def test_wire_formats_need_no_kernels(module):
    bad = {m for m in GRAPH[module] if m not in ("dprec.constants", "dprec._runtime.validation", "dprec._runtime.wire")}
    assert not bad, sorted(bad)


def test_version_is_pyproject_version():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    pyproject = Path(__file__).resolve().parents[1] / "pyproject.toml"
    if not pyproject.is_file():
        pytest.skip("pyproject.toml is not beside the tests (the tests of an installed wheel)")
    assert dprec.__version__ == tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]["version"]


# ---- the walk of one call: every Python call goes down the layers ------------------------------------


def _walk(call: Callable[[], object]) -> tuple[list[tuple[str, str, str]], list[str]]:
    """Run ``call`` under a profiler: every call from one dprec module into another (caller module,
    callee module, callee function), and the sequence of modules the calls enter."""
    edges: list[tuple[str, str, str]] = []
    entered: list[str] = []
    stack: list[str | None] = []

    def profile(frame, event, arg):  # noqa: ANN001 - the sys.setprofile signature
        if event == "call":
            name = frame.f_globals.get("__name__", "")
            ours = name == "dprec" or name.startswith("dprec.")
            caller = next((s for s in reversed(stack) if s), None)
            if ours:
                entered.append(name)
                if caller is not None and caller != name:
                    edges.append((caller, name, frame.f_code.co_name))
            stack.append(name if ours else None)
        elif event == "return" and stack:
            stack.pop()

    sys.setprofile(profile)
    try:
        call()
    finally:
        sys.setprofile(None)
    return edges, entered


def _update(kind: str) -> dict:
    rng = np.random.default_rng(0)
    update = {"w": rng.standard_normal((40, 25)).astype(np.float32), "b": rng.standard_normal(25).astype(np.float32)}
    if kind == "torch":
        torch = pytest.importorskip("torch")
        return {k: torch.from_numpy(v) for k, v in update.items()}
    return update


def _calls() -> dict[str, Callable[[str], Callable[[], object]]]:
    from dprec.transforms import CountSketch, RandomizedHadamard, fwht

    def encode(kind: str):
        codec, update = dprec.DPRECCodec(sigma=0.1, bits=4), _update(kind)
        return lambda: codec.encode(update, seed=1)

    def decode(kind: str):
        codec, update = dprec.DPRECCodec(sigma=0.1, bits=4), _update(kind)
        msgs = [codec.encode(update, seed=s) for s in (1, 2)]
        return lambda: (codec.decode(msgs[0], update), codec.aggregate(msgs, update))

    def qmgeo(kind: str):
        codec, update = dprec.QMGeoCodec(w_max=1.0, levels=4, p=0.5), _update(kind)
        return lambda: codec.decode(codec.encode(update), update)

    def transforms(kind: str):
        x = _update(kind)["w"].reshape(-1)
        return lambda: (fwht(x[:512]), RandomizedHadamard(x.shape[0], 3).forward(x), CountSketch(x.shape[0], 64, 3, 5).encode(x))

    def secagg(kind: str):
        from dprec.secagg import DDGPipeline

        pipe, x = DDGPipeline(1000, clip=10.0, bits=32, noise_stddev=1.0, num_clients=2, seed=4), _update(kind)["w"]
        x = x.reshape(-1)
        return lambda: pipe.decode(pipe.aggregate([pipe.encode(x), pipe.encode(x)]))

    def accounting(kind: str):
        codec = dprec.DPRECCodec(sigma=0.1, bits=4)
        update = _update(kind)
        return lambda: codec.epsilon(update, rounds=10, clients_per_round=10, num_clients=100, delta=1e-5)

    return {
        "DPRECCodec.encode": encode,
        "DPRECCodec.decode+aggregate": decode,
        "QMGeoCodec": qmgeo,
        "transforms": transforms,
        "secagg": secagg,
        "accounting": accounting,
    }


@pytest.mark.parametrize("kind", ["numpy", "torch"])
@pytest.mark.parametrize("what", sorted(_calls()))
def test_a_call_goes_down_the_layers_without_coming_back_up(what, kind):
    call = _calls()[what](kind)
    call()  # first use loads what it loads
    edges, entered = _walk(call)
    assert entered, "the profiler saw no dprec call"
    up = sorted({(a, b, f) for a, b, f in edges if not _goes_down(a, b)})
    assert not up, f"calls that go back up: {up}"


def test_the_walk_sees_a_call_that_goes_up():
    # The check above can fail: a call from the runtime into a mechanism is caught.
    edges, _ = _walk(lambda: _call_from("dprec._runtime.validation", dprec.DPRECCodec, 0.1))
    assert any(not _goes_down(a, b) for a, b, _ in edges), edges


def _call_from(module: str, fn: Callable, *args: object) -> object:
    """Call ``fn`` from a frame that claims to be in ``module``."""
    glb = {"__name__": module, "fn": fn, "args": args}
    exec("def trampoline():\n    return fn(*args)\n", glb)  # noqa: S102 - a frame in another module
    return glb["trampoline"]()


def _operations() -> dict[str, inspect.Signature]:
    return {
        name: inspect.signature(fn)
        for name, fn in vars(_backends.Kernels).items()
        if callable(fn) and not name.startswith("_")
    }


def test_protocol_lists_the_operations():
    assert {"stream_normals", "dot_products", "gumbel_argmax", "fwht", "count_sketch_encode"} <= set(_operations())


@pytest.mark.parametrize("backend", sorted(_backends.BY_NAME))
def test_every_backend_offers_every_operation_with_its_signature(backend):
    kernels = _backends.BY_NAME[backend]
    assert kernels.name == backend
    for name, want in _operations().items():
        got = inspect.signature(getattr(kernels, name))  # bound or static: no ``self``
        want_params = [p for p in want.parameters.values() if p.name != "self"]
        assert [p.name for p in got.parameters.values()] == [p.name for p in want_params], (backend, name)


def test_a_gpu_call_goes_down_the_layers(fake_cuda):
    # The CUDA backend's Python side, against the test-only fake of dprec._cuda (tests/fake_cuda.py).
    host = _update("numpy")
    update = {k: FakeGpuArray(fake_cuda, v) for k, v in host.items()}
    codec = dprec.DPRECCodec(sigma=0.1, bits=4)
    msgs = [codec.encode(update, seed=s) for s in (1, 2)]

    def call() -> None:
        codec.encode(update, seed=1)
        codec.aggregate(msgs, update)

    call()
    edges, _ = _walk(call)
    assert any(b == "dprec._runtime.backends.cuda" for _, b, _ in edges), "the walk did not reach the CUDA backend"
    up = sorted({(a, b, f) for a, b, f in edges if not _goes_down(a, b)})
    assert not up, f"calls that go back up: {up}"
