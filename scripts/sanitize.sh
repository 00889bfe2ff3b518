#!/usr/bin/env bash
# Build dprec._core with AddressSanitizer + UndefinedBehaviorSanitizer and run the native tests
# under it.
#
#   scripts/sanitize.sh                 # default test subset (a few minutes)
#   scripts/sanitize.sh tests/rec/test_kernels.py -k logits   # any pytest arguments instead
#
# Needs: gcc/g++ (or clang) with libasan, CMake >= 3.18, and a Python with numpy, pybind11,
# pytest and hypothesis (pip install pybind11 ".[test]"). No CUDA: the build uses
# -DDPREC_CUDA=OFF and the CUDA tests skip.
#
# Environment:
#   PYTHON       the interpreter to build for and test with (default: python3 on PATH)
#   BUILD_DIR    sanitized build directory (default: build/sanitize; never the wheel build)
#   CXX          the C++ compiler (default: g++)
#
# How it works: _core and the test-only _gpu_emulation are configured with CMAKE_CXX_FLAGS /
# CMAKE_SHARED_LINKER_FLAGS carrying -fsanitize=address,undefined (-fno-sanitize-recover=all
# so UBSan findings fail, -O1 -g for readable stacks) into BUILD_DIR. python/dprec is copied to
# a temporary directory with those sanitized modules (and without _cuda), and pytest runs
# with PYTHONPATH pointing there. CPython itself is not instrumented, so the ASan runtime is
# LD_PRELOADed; detect_leaks=0 because CPython does not free everything at exit;
# allocator_may_return_null=1 so that an oversized NumPy allocation is a MemoryError, as
# without ASan. Any ASan/UBSan report aborts the process, so pytest exits non-zero.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python3}"
CXX="${CXX:-g++}"
BUILD_DIR="${BUILD_DIR:-$ROOT/build/sanitize}"
JOBS="$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2)"

if [ "$#" -eq 0 ]; then
  set -- tests/rec/test_kernels.py tests/test_philox.py tests/transforms/test_hadamard.py tests/transforms/test_sketch.py \
         tests/transforms/test_native_hadamard_sketch.py tests/runtime/test_threads.py tests/robustness/test_bad_input.py \
         tests/rec/test_message_format.py tests/rec/test_codec.py tests/robustness/test_fuzz.py \
         tests/robustness/test_untrusted.py tests/qmgeo/test_quantize.py tests/qmgeo/test_pack.py
fi

PYBIND11_DIR="$("$PYTHON" -m pybind11 --cmakedir)"
SAN_FLAGS="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer -g"

cmake -S "$ROOT" -B "$BUILD_DIR" \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_COMPILER="$CXX" \
  -DCMAKE_CXX_FLAGS="$SAN_FLAGS" \
  -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=address,undefined" \
  -DCMAKE_MODULE_LINKER_FLAGS="-fsanitize=address,undefined" \
  -DDPREC_CUDA=OFF \
  -DDPREC_GPU_EMULATION=ON \
  -DPython_EXECUTABLE="$(command -v "$PYTHON")" \
  -Dpybind11_DIR="$PYBIND11_DIR"
# The test-only emulation too, so that its tests (when named) run sanitized, not skipped.
cmake --build "$BUILD_DIR" --target _core _gpu_emulation -j "$JOBS"

SOS=()
for mod in _core _gpu_emulation; do
  so="$(find "$BUILD_DIR" -maxdepth 2 -name "$mod*.so" | head -n 1)"
  [ -n "$so" ] || { echo "sanitize.sh: no $mod*.so in $BUILD_DIR" >&2; exit 1; }
  SOS+=("$so")
done

TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
cp -r "$ROOT/python/dprec" "$TMP/dprec"
rm -f "$TMP"/dprec/_core*.so "$TMP"/dprec/_core*.pyd "$TMP"/dprec/_cuda*.so "$TMP"/dprec/_cuda*.pyd \
  "$TMP"/dprec/_gpu_emulation*.so "$TMP"/dprec/_gpu_emulation*.pyd
cp "${SOS[@]}" "$TMP/dprec/"

LIBASAN="$("$CXX" -print-file-name=libasan.so)"
LIBUBSAN="$("$CXX" -print-file-name=libubsan.so)"
[ -f "$LIBASAN" ] || { echo "sanitize.sh: libasan not found ($LIBASAN)" >&2; exit 1; }
PRELOAD="$LIBASAN"
[ -f "$LIBUBSAN" ] && PRELOAD="$PRELOAD:$LIBUBSAN"

cd "$ROOT"
echo "sanitize.sh: running pytest $* with ${SOS[*]}"
env PYTHONPATH="$TMP" \
    LD_PRELOAD="$PRELOAD" \
    ASAN_OPTIONS="detect_leaks=0:allocator_may_return_null=1:abort_on_error=1:halt_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1" \
    UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1" \
    DPREC_SANITIZE=1 \
    "$PYTHON" -m pytest -p no:cacheprovider -q "$@"
