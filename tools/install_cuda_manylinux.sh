#!/usr/bin/env bash
# Installs the parts of the CUDA toolkit that dprec._cuda needs (nvcc, the static runtime,
# CUB) in a manylinux_2_28 container (AlmaLinux 8), for the Linux x86_64 wheels: cibuildwheel
# runs it once per container as `before-all` (pyproject.toml). The wheel needs only the
# NVIDIA driver at run time: the runtime is linked statically and nothing else from the
# toolkit is loaded.
#
# CUDA 12 rather than 13: a CUDA 12 build runs on drivers R525 and newer (CUDA 13 needs
# R580), which covers most clusters today, and 12.9 still compiles for sm_75 (Turing).
set -euo pipefail

CUDA_VERSION="${DPREC_WHEEL_CUDA_VERSION:-12.9}"
pkg_version="${CUDA_VERSION/./-}"

dnf install -y dnf-plugins-core
dnf config-manager --add-repo https://developer.download.nvidia.com/compute/cuda/repos/rhel8/x86_64/cuda-rhel8.repo
dnf install -y "cuda-nvcc-${pkg_version}" "cuda-cudart-devel-${pkg_version}" "cuda-cccl-${pkg_version}"
ln -sfn "/usr/local/cuda-${CUDA_VERSION}" /usr/local/cuda

# nvcc accepts host compilers only up to the GCC its release knows (GCC 14 for CUDA 12.9).
# The image's default gcc-toolset may be newer: then CUDA's host code uses gcc-toolset-14
# (the same libstdc++ ABI as the rest of the build).
host_gcc_major="$(g++ -dumpversion | cut -d. -f1)"
if [ "$host_gcc_major" -gt 14 ]; then
    dnf install -y gcc-toolset-14-gcc-c++
    ln -sfn /opt/rh/gcc-toolset-14/root/usr/bin/g++ /usr/local/bin/dprec-cuda-host-cxx
else
    ln -sfn "$(command -v g++)" /usr/local/bin/dprec-cuda-host-cxx
fi

/usr/local/cuda/bin/nvcc --version
/usr/local/bin/dprec-cuda-host-cxx --version | head -1
