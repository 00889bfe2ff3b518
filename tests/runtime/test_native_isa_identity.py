"""The C++ cross-ISA harness (tests/native/isa_identity.cpp): every kernel-table entry of every
ISA this CPU has, bit for bit against the baseline, and the known-answer digests pinned on
x86-64 (which AArch64 builds must reproduce; tools/check_neon.sh runs it under qemu).

It does not use dprec._core: the kernel sources are compiled here, with the project's flags,
by the C++ compiler on PATH (``$CXX``, else g++, clang++ or c++). Skipped without one, on
Windows (dprec is built with MSVC there; the harness is GCC/Clang code), and where the sources
are not next to the tests (an installed package).
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HARNESS = ROOT / "tests" / "native" / "isa_identity.cpp"
CPU = ROOT / "csrc" / "cpu"
# As CMakeLists.txt compiles _core (without the warnings), plus -pthread.
FLAGS = ["-std=c++17", "-O3", "-ffp-contract=off", "-fno-math-errno", "-fno-fast-math", "-pthread"]


def _compiler() -> str | None:
    for name in ([os.environ["CXX"]] if os.environ.get("CXX") else []) + ["g++", "clang++", "c++"]:
        path = shutil.which(name)
        if not path:
            continue
        try:
            version = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30).stdout
        except (OSError, subprocess.SubprocessError):
            continue
        if any(word in version.lower() for word in ("gcc", "g++", "clang", "free software foundation")):
            return path
    return None


def _units() -> tuple[list[tuple[Path, list[str]]], list[str]]:
    """(source, extra flags) of each translation unit, and the defines, for this machine."""
    units = [(CPU / "dispatch.cpp", []), (CPU / "kernels_baseline.cpp", []), (HARNESS, [])]
    machine = platform.machine().lower()
    if machine in ("x86_64", "amd64", "x64"):
        units += [(CPU / "kernels_avx2.cpp", ["-mavx2", "-mfma"]),
                  (CPU / "kernels_avx512.cpp", ["-mavx512f", "-Wno-uninitialized"])]
        return units, ["-DDPREC_HAVE_X86_KERNELS"]
    if machine in ("aarch64", "arm64"):
        return units + [(CPU / "kernels_neon.cpp", [])], ["-DDPREC_HAVE_NEON_KERNELS"]
    return units, []


def test_isa_identity_harness(tmp_path):
    if sys.platform == "win32":
        pytest.skip("the C++ harness is built with GCC/Clang; on Windows dprec is built with MSVC")
    if not HARNESS.exists() or not CPU.exists():
        pytest.skip("the C++ sources are not next to the tests (installed package)")
    cxx = _compiler()
    if cxx is None:
        pytest.skip("no C++ compiler (g++, clang++ or $CXX) on PATH")
    units, defines = _units()

    def compile_unit(unit: tuple[Path, list[str]]) -> Path:
        src, extra = unit
        obj = tmp_path / (src.stem + ".o")
        r = subprocess.run([cxx, *FLAGS, *defines, *extra, "-c", str(src), "-o", str(obj)],
                           capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, f"compiling {src.name} failed:\n{r.stderr[-4000:]}"
        return obj

    with ThreadPoolExecutor(max_workers=max(1, min(len(units), os.cpu_count() or 1))) as pool:
        objects = list(pool.map(compile_unit, units))
    exe = tmp_path / "isa_identity"
    r = subprocess.run([cxx, "-pthread", *map(str, objects), "-o", str(exe)], capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, f"linking failed:\n{r.stderr[-4000:]}"

    r = subprocess.run([str(exe)], capture_output=True, text=True, timeout=600)
    print(r.stdout)
    assert r.returncode == 0 and " 0 failures" in r.stdout, r.stdout[-8000:] + r.stderr[-2000:]
