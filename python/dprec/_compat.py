"""Module paths that moved when dprec was split into one package per mechanism.

``import dprec.codec`` (and the other old paths below) still works and gives the module at
its new path, with a :class:`DeprecationWarning` naming that path. The names users import
from the packages (``from dprec import DPRECCodec``, ``dprec.rec``, ``dprec.qmgeo``, ...)
did not move and do not warn.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings
from types import ModuleType

#: Old module path -> new module path.
MOVED = {
    "dprec.codec": "dprec.rec.codec",
    "dprec.message": "dprec.rec.message",
    "dprec.qmgeo_codec": "dprec.qmgeo.codec",
    "dprec.hadamard": "dprec.transforms.hadamard",
    "dprec.sketch": "dprec.transforms.sketch",
    "dprec.demo": "dprec.compare.demo",
}


_INTERNAL = (__file__, __file__.rsplit("_compat.py", 1)[0] + "__init__.py")


def _caller_stacklevel() -> int:
    """The stacklevel of the first frame outside the import machinery and this module."""
    frame = sys._getframe(2)  # warn_moved's caller
    level = 2  # in warnings.warn's count, from warn_moved
    while frame is not None:
        name = frame.f_code.co_filename
        if "importlib" in name and "_bootstrap" in name:
            pass  # warnings.warn does not count the import system's frames
        elif name in _INTERNAL:
            level += 1
        else:
            break
        frame = frame.f_back  # type: ignore[assignment]
    return level


def warn_moved(old: str, category: type[Warning] = DeprecationWarning) -> None:
    warnings.warn(
        f"{old} moved to {MOVED[old]}: import it from there (the old path will be removed in a future release)",
        category,
        stacklevel=_caller_stacklevel(),
    )


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Answers an old path with the module at its new path (one object under both names)."""

    def __init__(self) -> None:
        self._specs: dict[str, importlib.machinery.ModuleSpec | None] = {}

    def find_spec(
        self, fullname: str, path: object = None, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in MOVED:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        warn_moved(spec.name)
        module = importlib.import_module(MOVED[spec.name])
        self._specs[module.__name__] = module.__spec__
        return module

    def get_code(self, fullname: str) -> object:
        # runpy (``python -m dprec.demo``) asks the loader for code: run the module at its new path. A
        # FutureWarning, which Python shows by default: the person typing the command is the one to tell.
        warn_moved(fullname, FutureWarning)
        source = f"import runpy\nrunpy.run_module({MOVED[fullname]!r}, run_name='__main__', alter_sys=True)\n"
        return compile(source, f"<{fullname}>", "exec")

    def exec_module(self, module: ModuleType) -> None:
        # The import system stamped the alias's spec on the real module: give it its own back.
        module.__spec__ = self._specs.pop(module.__name__, module.__spec__)


_FINDER = _MovedModules()


def install() -> None:
    if not any(isinstance(f, _MovedModules) for f in sys.meta_path):
        sys.meta_path.append(_FINDER)


def moved_attribute(name: str) -> ModuleType:
    """``dprec.<name>`` for an old module name (``dprec.hadamard`` without importing it)."""
    old = f"dprec.{name}"
    if old not in MOVED:
        raise AttributeError(f"module 'dprec' has no attribute {name!r}")
    warn_moved(old)
    return importlib.import_module(MOVED[old])
