#!/usr/bin/env bash
# AArch64 / NEON check on an x86-64 Linux machine: cross-builds dprec for aarch64 and runs, under
# qemu-user,
#   1. the C++ cross-ISA harness (tests/native/isa_identity.cpp): neon against baseline, bit for
#      bit, on every kernel-table entry, and the known-answer digests pinned on x86-64;
#   2. the native bit-identity tests of the pytest suite with an aarch64 CPython 3.11, NumPy,
#      SciPy, pytest and hypothesis, against an aarch64 build of dprec._core and of the
#      test-only dprec._gpu_emulation (the CUDA kernels run on the host).
#
#   tools/check_neon.sh                  # everything (about 12 minutes on 2 cores)
#   tools/check_neon.sh --harness-only   # step 1 only (under a minute)
#   tools/check_neon.sh -- tests/rec/test_kernels.py -k logits   # other pytest arguments for step 2
#
# What it needs and installs (Debian 12 "bookworm": the .deb names are its; run as root or with
# sudo for the apt steps, which are skipped when everything is there already):
#   - apt: g++-aarch64-linux-gnu, qemu-user, cmake (unless a cmake >= 3.18 is on PATH), and the
#     arm64 architecture (dpkg --add-architecture arm64) to download arm64 .debs;
#   - an arm64 sysroot in $SYSROOT (default /opt/arm64-sysroot), made once with dpkg -x from
#     `apt-get download`: python3.11-minimal, libpython3.11{,-minimal,-stdlib,-dev} and the
#     libraries they load (libc6, libstdc++6, libssl3, libffi8, zlib1g, ...);
#   - aarch64 cp311 wheels of numpy, scipy (test_rec.py imports it), pytest, hypothesis and
#     pybind11 (headers and CMake files), fetched once with `pip download --platform
#     manylinux..._aarch64` by the host's $PYTHON (any Python 3 with pip) and unpacked into
#     $SYSROOT/dprec-site. About 70 MB of downloads, 350 MB on disk.
# Then every run cross-builds _core and _gpu_emulation into $BUILD_DIR (default
# /tmp/neon-build-aarch64) with CMake and a generated toolchain file, copies python/dprec plus
# those two modules into $BUILD_DIR/py, and runs the tests with PYTHONPATH there.
#
# Environment: SYSROOT, BUILD_DIR, PYTHON (host Python with pip, default python3), JOBS
# (default 2), QEMU (default qemu-aarch64).
# Timings under qemu say nothing about speed on real AArch64 hardware.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SYSROOT="${SYSROOT:-/opt/arm64-sysroot}"
BUILD_DIR="${BUILD_DIR:-/tmp/neon-build-aarch64}"
PYTHON="${PYTHON:-python3}"
JOBS="${JOBS:-2}"
QEMU="${QEMU:-qemu-aarch64}"
CROSS=aarch64-linux-gnu
SITE="$SYSROOT/dprec-site"
WHEELS="$SYSROOT/dprec-wheels"
DEBS="$SYSROOT/dprec-debs"

# Pinned so that reruns test the same thing.
PY_PACKAGES=(numpy==2.4.6 scipy==1.17.1 pytest==9.2.0 hypothesis==6.170.15 pybind11==3.1.0)
DEB_PACKAGES=(python3.11-minimal libpython3.11-minimal libpython3.11-stdlib libpython3.11 libpython3.11-dev
              libc6 libgcc-s1 libstdc++6 gcc-12-base zlib1g libexpat1 libffi8 libssl3 libbz2-1.0 liblzma5
              libsqlite3-0 libncursesw6 libtinfo6 libreadline8 libuuid1 libdb5.3 libgdbm6 libnsl2 libtirpc3
              libcrypt1 libgssapi-krb5-2 libkrb5-3 libk5crypto3 libkrb5support0 libkeyutils1 libcom-err2)

# The native tests that compare ISAs, pin the native kernels' bits against the NumPy reference
# or the host emulation of the CUDA kernels, or exercise the ISA and thread switches. Not
# here: accounting, Flower, demo, torch, CUDA (no native kernel or no aarch64 wheel), and
# tests/robustness/test_fuzz.py (argument validation, about 2.5 minutes under qemu: pass it after --).
DEFAULT_TESTS=(tests/test_philox.py tests/rec/test_kernels.py tests/transforms/test_hadamard.py tests/transforms/test_sketch.py
               tests/transforms/test_native_hadamard_sketch.py tests/rec/test_codec.py tests/robustness/test_bad_input.py
               tests/rec/test_message_format.py tests/runtime/test_threads.py tests/cuda/test_gpu_emulation.py
               tests/cuda/test_gpu_emulation_hadamard.py tests/cuda/test_gpu_emulation_sketch.py
               tests/runtime/test_robustness_threads.py tests/robustness/test_values.py
               tests/robustness/test_arrays.py tests/robustness/test_args.py)
DESELECT=(
  # The largest sizes of the GPU-emulation FWHT tests (30-60 s each under qemu; the smaller
  # sizes of the same tests run, and the harness covers the NEON FWHT kernels).
  "tests/cuda/test_gpu_emulation_hadamard.py::test_fwht_long_rows_bit_identical_to_cpu[float32-27-1-0]"
  "tests/cuda/test_gpu_emulation_hadamard.py::test_fwht_long_rows_bit_identical_to_cpu[float32-26-1-0]"
  "tests/cuda/test_gpu_emulation_hadamard.py::test_fwht_long_rows_bit_identical_to_cpu[float64-26-1-0]"
  "tests/cuda/test_gpu_emulation_hadamard.py::test_rotation_with_strided_passes[33554439-float32-1-0]"
  # Ctrl-C and GIL timing tests (about 40 s each under qemu; nothing ISA-specific).
  "tests/runtime/test_threads.py::test_ctrl_c_stops_a_long_kernel"
  "tests/runtime/test_threads.py::test_gil_is_released_during_long_kernels"
  # A subprocess with a fixed 30 s budget for work that takes longer under emulation.
  "tests/runtime/test_robustness_threads.py::test_issue_reproducer_returns"
  # Needs setrlimit(RLIMIT_AS) to bind thread stacks; qemu-user does not pass the guest's
  # RLIMIT_AS on to the host (it would constrain qemu itself), so every thread starts.
  "tests/runtime/test_robustness_threads.py::test_failed_thread_start_raises_and_the_pool_recovers"
)

HARNESS_ONLY=0
PYTEST_ARGS=()
while [ "$#" -gt 0 ]; do
  case "$1" in
    --harness-only) HARNESS_ONLY=1 ;;
    --) shift; PYTEST_ARGS=("$@"); break ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "check_neon.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done

step() { printf '\n==> %s\n' "$*"; }
now() { date +%s; }
T_START=$(now)
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo

# ---- host tools ------------------------------------------------------------------------------
step "host tools"
need_apt=()
command -v "$CROSS-g++" >/dev/null 2>&1 || need_apt+=(g++-aarch64-linux-gnu)
command -v "$QEMU" >/dev/null 2>&1 || need_apt+=(qemu-user)
command -v cmake >/dev/null 2>&1 || need_apt+=(cmake)
if [ "${#need_apt[@]}" -gt 0 ]; then
  $SUDO apt-get update -q
  $SUDO apt-get install -y --no-install-recommends "${need_apt[@]}"
fi
echo "$("$CROSS-g++" --version | head -n 1); $("$QEMU" --version | head -n 1); $(cmake --version | head -n 1)"

# ---- arm64 sysroot (once) --------------------------------------------------------------------
if [ ! -x "$SYSROOT/usr/bin/python3.11" ] || [ ! -f "$SYSROOT/.dprec-sysroot-done" ]; then
  step "arm64 sysroot in $SYSROOT (once)"
  if ! dpkg --print-foreign-architectures | grep -qx arm64; then
    $SUDO dpkg --add-architecture arm64
    $SUDO apt-get update -q
  elif ! apt-cache show libc6:arm64 >/dev/null 2>&1; then
    $SUDO apt-get update -q
  fi
  $SUDO mkdir -p "$DEBS"
  $SUDO chown "$(id -u):$(id -g)" "$SYSROOT" "$DEBS"
  (cd "$DEBS" && apt-get download "${DEB_PACKAGES[@]/%/:arm64}")
  for deb in "$DEBS"/*.deb; do dpkg -x "$deb" "$SYSROOT"; done
  touch "$SYSROOT/.dprec-sysroot-done"
fi
# A merged-/usr sysroot: the loader is looked up as /lib/ld-linux-aarch64.so.1.
[ -e "$SYSROOT/lib" ] || ln -s usr/lib "$SYSROOT/lib"
"$QEMU" -L "$SYSROOT" "$SYSROOT/usr/bin/python3.11" -c 'import sys, platform; print("target Python", sys.version.split()[0], platform.machine())'

if [ ! -f "$SITE/.dprec-site-done" ]; then
  step "aarch64 wheels into $SITE (once)"
  mkdir -p "$WHEELS" "$SITE"
  "$PYTHON" -m pip download --quiet --dest "$WHEELS" --only-binary=:all: --python-version 3.11 \
    --implementation cp --abi cp311 --abi abi3 --abi none \
    --platform manylinux_2_28_aarch64 --platform manylinux_2_17_aarch64 --platform manylinux2014_aarch64 \
    --platform any "${PY_PACKAGES[@]}"
  for whl in "$WHEELS"/*.whl; do "$PYTHON" -m zipfile -e "$whl" "$SITE"; done
  touch "$SITE/.dprec-site-done"
fi

# ---- C++ harness for aarch64 -----------------------------------------------------------------
CXXFLAGS_DPREC=(-std=c++17 -O3 -ffp-contract=off -fno-math-errno -fno-fast-math -pthread)
step "C++ harness (tests/native/isa_identity.cpp), aarch64, under qemu"
mkdir -p "$BUILD_DIR/harness"
H="$BUILD_DIR/harness"
pids=()
for src in csrc/cpu/dispatch.cpp csrc/cpu/kernels_baseline.cpp csrc/cpu/kernels_neon.cpp tests/native/isa_identity.cpp; do
  "$CROSS-g++" "${CXXFLAGS_DPREC[@]}" -DDPREC_HAVE_NEON_KERNELS -c "$ROOT/$src" -o "$H/$(basename "$src" .cpp).o" &
  pids+=($!)
  if [ "${#pids[@]}" -ge "$JOBS" ]; then wait "${pids[0]}"; pids=("${pids[@]:1}"); fi
done
for p in "${pids[@]}"; do wait "$p"; done
"$CROSS-g++" -static -pthread "$H"/dispatch.o "$H"/kernels_baseline.o "$H"/kernels_neon.o "$H"/isa_identity.o \
  -o "$H/isa_identity"
T0=$(now)
set +e
"$QEMU" "$H/isa_identity" --full | tee "$H/output.txt"
HARNESS_RC=${PIPESTATUS[0]}
set -e
HARNESS_S=$(( $(now) - T0 ))
HARNESS_LINE="$(tail -n 1 "$H/output.txt")"

if [ "$HARNESS_ONLY" -eq 1 ]; then
  step "summary"
  echo "harness (aarch64, qemu, ${HARNESS_S}s): $HARNESS_LINE"
  exit "$HARNESS_RC"
fi

# ---- dprec._core for aarch64 -----------------------------------------------------------------
step "cross-build dprec._core and dprec._gpu_emulation for aarch64 into $BUILD_DIR/core"
cat > "$BUILD_DIR/toolchain-aarch64.cmake" <<EOF
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER $CROSS-gcc)
set(CMAKE_CXX_COMPILER $CROSS-g++)
set(CMAKE_FIND_ROOT_PATH "$SYSROOT")
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)
EOF
# The aarch64 CPython under qemu, as a host-runnable wrapper. It is FindPython's interpreter,
# so the version and the extension suffix (.cpython-311-aarch64-linux-gnu.so) are the
# target's (the headers come from the sysroot, pyconfig.h from its multiarch directory), and
# it runs the tests. "-0 \$0" makes the wrapper sys.executable, so tests that start
# `sys.executable` in a subprocess work without binfmt_misc (sys.prefix is then /usr,
# which qemu -L maps into the sysroot).
cat > "$BUILD_DIR/python3.11-aarch64" <<EOF
#!/bin/sh
exec "$QEMU" -L "$SYSROOT" -0 "\$0" "$SYSROOT/usr/bin/python3.11" "\$@"
EOF
chmod +x "$BUILD_DIR/python3.11-aarch64"
# Python.h includes the multiarch wrapper pyconfig.h, which includes
# <aarch64-linux-gnu/python3.11/pyconfig.h>: give the compiler just that directory.
mkdir -p "$BUILD_DIR/pyinc/$CROSS"
ln -sfn "$SYSROOT/usr/include/$CROSS/python3.11" "$BUILD_DIR/pyinc/$CROSS/python3.11"
# A build directory configured from another checkout cannot be reused.
if [ -f "$BUILD_DIR/core/CMakeCache.txt" ] && ! grep -qxF "CMAKE_HOME_DIRECTORY:INTERNAL=$ROOT" "$BUILD_DIR/core/CMakeCache.txt"; then
    rm -rf "$BUILD_DIR/core"
fi
cmake -S "$ROOT" -B "$BUILD_DIR/core" \
  -DCMAKE_TOOLCHAIN_FILE="$BUILD_DIR/toolchain-aarch64.cmake" \
  -DCMAKE_BUILD_TYPE=Release \
  -DDPREC_CUDA=OFF \
  -DDPREC_GPU_EMULATION=ON \
  -DPython_EXECUTABLE="$BUILD_DIR/python3.11-aarch64" \
  -DPython_INCLUDE_DIR="$SYSROOT/usr/include/python3.11" \
  -DCMAKE_CXX_FLAGS="-isystem $BUILD_DIR/pyinc" \
  -Dpybind11_DIR="$SITE/pybind11/share/cmake/pybind11" >"$BUILD_DIR/cmake-configure.log" 2>&1 \
  || { cat "$BUILD_DIR/cmake-configure.log"; exit 1; }
grep -E "dprec:|Found Python" "$BUILD_DIR/cmake-configure.log" || true
cmake --build "$BUILD_DIR/core" --target _core _gpu_emulation -j "$JOBS" 2>&1 | grep -vE "Wignored-attributes|required from|In (static member )?function|In instantiation|In substitution" | tail -n 5
# The emulation tests in DEFAULT_TESTS would skip without their module: require it.
SOS=()
for mod in _core _gpu_emulation; do
  so="$(find "$BUILD_DIR/core" -maxdepth 2 -name "$mod.cpython-311-aarch64-linux-gnu.so" | head -n 1)"
  [ -n "$so" ] || { echo "check_neon.sh: no $mod.cpython-311-aarch64-linux-gnu.so in $BUILD_DIR/core" >&2; exit 1; }
  file "$so" 2>/dev/null || true
  SOS+=("$so")
done

rm -rf "$BUILD_DIR/py"
mkdir -p "$BUILD_DIR/py"
cp -r "$ROOT/python/dprec" "$BUILD_DIR/py/dprec"
find "$BUILD_DIR/py/dprec" \( -name '_core*.so' -o -name '_core*.pyd' -o -name '_cuda*.so' -o -name '_cuda*.pyd' \
  -o -name '_gpu_emulation*.so' -o -name '_gpu_emulation*.pyd' -o -name __pycache__ \) -prune -exec rm -rf {} +
cp "${SOS[@]}" "$BUILD_DIR/py/dprec/"

PY_AARCH64=("$BUILD_DIR/python3.11-aarch64")
export PYTHONPATH="$BUILD_DIR/py:$SITE"
export PYTHONDONTWRITEBYTECODE=1
"${PY_AARCH64[@]}" -c 'import dprec, dprec._core as c, dprec._gpu_emulation, numpy, platform
assert dprec.__file__.startswith("'"$BUILD_DIR/py"'"), dprec.__file__
print("dprec from", dprec.__file__, "| machine", platform.machine(), "| numpy", numpy.__version__)
print("available_isas:", c.available_isas(), "| get_isa:", c.get_isa())
assert c.available_isas() == ["neon", "baseline"], c.available_isas()'

# ---- pytest under qemu -----------------------------------------------------------------------
if [ "${#PYTEST_ARGS[@]}" -eq 0 ]; then
  PYTEST_ARGS=("${DEFAULT_TESTS[@]}")
  for d in "${DESELECT[@]}"; do PYTEST_ARGS+=(--deselect "$d"); done
fi
step "pytest under qemu: ${PYTEST_ARGS[*]}"
cd "$ROOT"
T0=$(now)
set +e
"${PY_AARCH64[@]}" -m pytest -p no:cacheprovider -q -ra "${PYTEST_ARGS[@]}" 2>&1 | tee "$BUILD_DIR/pytest.txt"
PYTEST_RC=${PIPESTATUS[0]}
set -e
PYTEST_S=$(( $(now) - T0 ))

step "summary"
echo "harness (aarch64, qemu, ${HARNESS_S}s): $HARNESS_LINE"
echo "pytest  (aarch64, qemu, ${PYTEST_S}s): $(grep -E '^(=+ )?[0-9]+ (passed|failed)|no tests ran' "$BUILD_DIR/pytest.txt" | tail -n 1)"
echo "total $(( $(now) - T_START ))s; timings under emulation say nothing about speed on AArch64 hardware"
[ "$HARNESS_RC" -eq 0 ] && [ "$PYTEST_RC" -eq 0 ]
