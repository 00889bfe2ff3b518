#!/usr/bin/env bash
# The GPU session of issue 13 in one command: build dprec with its CUDA backend, report
# the machine, run every GPU test (plain, under compute-sanitizer, the stream tests with
# eager module loading), the stress tests, and the GPU benchmarks; logs go to $OUT (or
# ./gpu-check when OUT is unset). Steps have their own time limits and are skipped once
# the whole run nears DPREC_GPU_CHECK_BUDGET seconds, so one hang cannot eat the lease.
#
#   bash scripts/gpu_check.sh [steps]     # steps: any of build info tests stress streams
#                                         # sanitize bench bench_quick bench_shapes profile
#                                         # wheel ptx,
#                                         # run in the order given
#                                         # (default: all, in that order)
#
# Needs: nvcc, cmake, pybind11, scikit-build-core, PyTorch with CUDA (CuPy optional).
set -u
OUT=${OUT:-$PWD/gpu-check}
mkdir -p "$OUT"
LOG=$OUT/gpu_check.log
BUDGET=${DPREC_GPU_CHECK_BUDGET:-570}
ARCH=${DPREC_CUDA_ARCH:-90}
START=$SECONDS
PY=${PYTHON:-python3}
STEPS=${*:-build info tests stress streams sanitize bench}
export PYTHONUNBUFFERED=1

say() { echo "=== [$((SECONDS - START))s] $*" | tee -a "$LOG"; }
# run LIMIT_S NAME CMD...: run with a time limit if enough of the budget is left.
run() {
  local limit=$1 name=$2
  shift 2
  local left=$((BUDGET - (SECONDS - START)))
  if ((left < 20)); then say "SKIP $name (budget spent)"; return 0; fi
  ((limit > left)) && limit=$left
  say "$name (limit ${limit}s): $*"
  timeout --signal=INT --kill-after=10 "$limit" "$@" >>"$LOG" 2>&1
  local rc=$?
  say "$name -> rc=$rc"
  return 0
}

GPU_TESTS=(tests/cuda/test_cuda.py tests/cuda/test_cuda_hadamard.py tests/cuda/test_cuda_sketch.py tests/cuda/test_cuda_modular.py
  tests/cuda/test_cuda_interop.py)
PYTEST=("$PY" -m pytest -q -p no:cacheprovider -o addopts= -rfEs)

step_build() {
  # sm_90 only: this machine's GPU, and a quarter of the default build's compile time. With
  # the test-only dprec._gpu_emulation, which the GPU tests compare the device against.
  run 300 build env CMAKE_BUILD_PARALLEL_LEVEL=16 "$PY" -m pip install -q --no-build-isolation --no-deps \
    -C cmake.define.DPREC_CUDA=ON -C cmake.define.CMAKE_CUDA_ARCHITECTURES="$ARCH" \
    -C cmake.define.DPREC_GPU_EMULATION=ON -C build-dir=/tmp/dprec-build .
}
step_info() {
  run 30 nvidia-smi nvidia-smi
  run 10 nvcc nvcc --version
  run 60 dprec-info "$PY" -m dprec info
  run 60 versions "$PY" -c "import torch, numpy, dprec; print('torch', torch.__version__, torch.version.cuda, torch.cuda.get_device_name()); print('numpy', numpy.__version__); import cupy; print('cupy', cupy.__version__)"
}
step_tests() {
  run 300 gpu-tests "${PYTEST[@]}" "${GPU_TESTS[@]}" tests/cuda/test_cuda_runtime.py tests/integrations/test_torch.py tests/rec/test_codec.py \
    tests/robustness/test_bad_input.py tests/transforms/test_hadamard.py tests/transforms/test_sketch.py tests/cuda/test_gpu_emulation.py \
    tests/cuda/test_gpu_emulation_modular.py
}
step_stress() {
  run 240 stress "${PYTEST[@]}" tests/cuda/test_cuda_stress.py
}
step_streams() {
  run 60 streams "${PYTEST[@]}" "${GPU_TESTS[@]}" -k "stream"
  run 60 streams-eager env CUDA_MODULE_LOADING=EAGER "${PYTEST[@]}" "${GPU_TESTS[@]}" -k "stream"
}
step_sanitize() {
  # memcheck over the kernels' tests; racecheck and synccheck where kernels share memory
  # and synchronise (the FWHT passes, the count-sketch warp fold).
  run 150 sanitizer-memcheck compute-sanitizer --tool memcheck --error-exitcode 99 --print-limit 20 \
    "${PYTEST[@]}" -x tests/cuda/test_cuda.py tests/cuda/test_cuda_hadamard.py tests/cuda/test_cuda_sketch.py tests/cuda/test_cuda_modular.py \
    -k "not 2_26 and not 2_24 and not 65536 and not chi_square and not several_batches and not 1000_clients and not grid_cap"
  for tool in racecheck synccheck; do
    run 120 "sanitizer-$tool" compute-sanitizer --tool "$tool" --error-exitcode 99 --print-limit 20 \
      "$PY" scripts/gpu_race_targets.py
  done
}
step_profile() {
  # What bounds the encode (llr vs its generate-only limit) and the FWHT passes at 2^26.
  run 120 ncu-encode ncu --kernel-name regex:"llr|generate_only" --launch-count 2 --section SpeedOfLight \
    --section ComputeWorkloadAnalysis --section Occupancy "$PY" -c "
import torch, dprec
from dprec import rec
x = torch.randn(1 << 24, device='cuda')
rec.logits(x, 1, 2, 7, sigma=1.0)
dprec._runtime.native.cuda_module().generate_only(0, torch.cuda.current_stream().cuda_stream, 1 << 24, 1, 2, 128)
torch.cuda.synchronize()"
  run 120 ncu-fwht ncu --kernel-name regex:fwht_pass --launch-count 2 --section SpeedOfLight \
    --section MemoryWorkloadAnalysis --section Occupancy "$PY" -c "
import torch
from dprec.transforms.hadamard import fwht
x = torch.randn(1 << 26, device='cuda')
fwht(x, inplace=True)
torch.cuda.synchronize()"
}
step_bench_quick() {
  BLOG=$OUT/bench.log
  run 60 bench-gpu-quick sh -c "$PY bench/bench_gpu.py --quick >>'$BLOG' 2>&1"
  run 60 bench-gpu-hadamard-quick sh -c "$PY bench/bench_gpu_hadamard.py --quick >>'$BLOG' 2>&1"
  run 90 bench-gpu-sketch-shapes sh -c "$PY bench/bench_gpu_sketch.py --quick --cols 1 3 64 65536 --rows 1 40 >>'$BLOG' 2>&1"
  run 60 bench-gpu-secagg-quick sh -c "$PY bench/bench_gpu_secagg.py --quick >>'$BLOG' 2>&1"
}
step_bench_shapes() {
  BLOG=$OUT/bench.log
  run 120 bench-gpu-sketch-shapes sh -c "$PY bench/bench_gpu_sketch.py --log2-d 22 --rows 1 40 --cols 1 3 64 65536 --repeat 3 >>'$BLOG' 2>&1"
}
step_bench() {
  BLOG=$OUT/bench.log
  run 240 bench-gpu sh -c "$PY bench/bench_gpu.py >>'$BLOG' 2>&1"
  run 120 bench-gpu-hadamard sh -c "$PY bench/bench_gpu_hadamard.py >>'$BLOG' 2>&1"
  run 120 bench-gpu-sketch sh -c "$PY bench/bench_gpu_sketch.py >>'$BLOG' 2>&1"
  run 120 bench-gpu-secagg sh -c "$PY bench/bench_gpu_secagg.py >>'$BLOG' 2>&1"
}
step_wheel() {
  # A release-target wheel (sm_75..sm_90 machine code plus compute_90 PTX, no emulation module),
  # installed into its own directory (the GPU machine has no package index, so no virtualenv with
  # its own NumPy), and the GPU tests run from a copy of tests/ against it.
  local whl=/tmp/dprec-wheel site=/tmp/dprec-wheel-site copy=/tmp/dprec-wheel-tests
  rm -rf "$whl" "$site" "$copy"
  run 300 wheel-build env CMAKE_BUILD_PARALLEL_LEVEL=16 "$PY" -m pip wheel -q --no-build-isolation --no-deps -w "$whl" \
    -C cmake.define.DPREC_CUDA=ON -C cmake.define.DPREC_CUDA_ARCHITECTURES=release \
    -C cmake.define.DPREC_GPU_EMULATION=OFF -C build-dir=/tmp/dprec-wheel-build .
  run 60 wheel-install "$PY" -m pip install -q --no-deps --no-index --target "$site" "$whl"/*.whl
  mkdir -p "$copy" && cp -r tests "$copy"/
  run 60 wheel-archs sh -c "cuobjdump --list-elf $site/dprec/_cuda*.so; cuobjdump --list-ptx $site/dprec/_cuda*.so"
  run 240 wheel-tests sh -c "cd $copy && PYTHONPATH=$site ${PYTEST[*]} ${GPU_TESTS[*]} tests/cuda/test_cuda_runtime.py \
    tests/integrations/test_torch.py tests/rec/test_codec.py tests/transforms/test_hadamard.py tests/transforms/test_sketch.py"
}
step_ptx() {
  # The PTX JIT path of dprec alone: its CUDA module built as PTX only (compute_75, as a build
  # without a GPU gets, and compute_90), so the driver JIT-compiles every kernel here. Not
  # CUDA_FORCE_PTX_JIT=1: that forces PyTorch's kernels through the JIT too, and PyTorch ships no
  # PTX for many of them (its kernels then fail with "no kernel image").
  local arch site copy=/tmp/dprec-ptx-tests
  mkdir -p "$copy" && cp -r tests "$copy"/
  for arch in 75-virtual 90-virtual; do
    site=/tmp/dprec-ptx-$arch
    rm -rf "$site"
    run 200 "ptx-build-$arch" env CMAKE_BUILD_PARALLEL_LEVEL=16 "$PY" -m pip install -q --no-build-isolation --no-deps \
      --target "$site" -C cmake.define.DPREC_CUDA=ON -C cmake.define.CMAKE_CUDA_ARCHITECTURES="$arch" \
      -C cmake.define.DPREC_GPU_EMULATION=OFF -C build-dir="/tmp/dprec-ptx-build-$arch" .
    run 180 "ptx-tests-$arch" sh -c "cd $copy && PYTHONPATH=$site ${PYTEST[*]} ${GPU_TESTS[*]} tests/cuda/test_cuda_runtime.py"
  done
}
for step in $STEPS; do "step_$step"; done
say "done"
