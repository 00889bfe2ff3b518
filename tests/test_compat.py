"""The module paths that moved (dprec._compat): they import, as the module at the new path, with a
DeprecationWarning that names the new path and points at the caller's line."""

from __future__ import annotations

import importlib
import subprocess
import sys
import warnings

import pytest

import dprec
from dprec._compat import MOVED


@pytest.mark.parametrize("old", sorted(MOVED))
def test_old_path_imports_the_new_module_with_a_warning(old):
    code = (
        "import warnings, importlib\n"
        "warnings.simplefilter('error')\n"
        "import dprec\n"  # the names users import did not move: no warning
        "warnings.simplefilter('always')\n"
        "with warnings.catch_warnings(record=True) as w:\n"
        f"    import {old} as m\n"
        f"assert m is importlib.import_module({MOVED[old]!r}), m\n"
        "assert m.__spec__.name == m.__name__, (m.__spec__.name, m.__name__)\n"
        "assert len(w) == 1 and w[0].category is DeprecationWarning, [str(x.message) for x in w]\n"
        f"assert {MOVED[old]!r} in str(w[0].message)\n"
        "assert w[0].filename == '<string>' and w[0].lineno == 6, (w[0].filename, w[0].lineno)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_from_old_path_import_a_name():
    with pytest.warns(DeprecationWarning, match="dprec.transforms.hadamard"):
        sys.modules.pop("dprec.hadamard", None)
        from dprec.hadamard import fwht  # noqa: F401
    assert fwht is dprec.transforms.fwht


@pytest.mark.parametrize("name", ["hadamard", "sketch", "codec"])
def test_old_attribute_of_dprec_warns(name, monkeypatch):
    monkeypatch.delitem(vars(dprec), name, raising=False)  # an earlier import of the old path sets it
    with pytest.warns(DeprecationWarning, match=f"dprec.{name} moved"):
        module = getattr(dprec, name)
    assert module is importlib.import_module(MOVED[f"dprec.{name}"])


def test_unknown_attribute_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        dprec.nope  # noqa: B018
    assert not hasattr(dprec, "_arrays")  # private modules moved without an alias


def test_current_names_do_not_warn():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        from dprec import DPRECCodec, QMGeoCodec, qmgeo, rec, transforms  # noqa: F401
        from dprec.qmgeo import pack, quantize  # noqa: F401
        from dprec.rec import DPRECMessage, candidate  # noqa: F401
        from dprec.transforms import CountSketch, fwht  # noqa: F401


def test_python_dash_m_old_path_runs_the_new_module():
    proc = subprocess.run([sys.executable, "-m", "dprec.demo", "--help"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "usage" in proc.stdout.lower()
    assert "dprec.demo moved to dprec.compare.demo" in proc.stderr
