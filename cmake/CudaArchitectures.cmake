# Sets CMAKE_CUDA_ARCHITECTURES from DPREC_CUDA_ARCHITECTURES unless the caller gave it.
#   release: Turing to Hopper as machine code, plus PTX of the newest for later GPUs to JIT
#            (what the Linux x86_64 wheel ships; about 4x the compile time of one target).
#   auto:    a source build compiles for the GPUs this machine has (nvidia-smi), and without
#            one for PTX of the oldest supported GPU only, which the driver JIT-compiles once
#            for whatever GPU it meets (and caches); "release" gives machine code for all.
#   other:   a CMake architecture list, used as given ("90", "80-real;90", "native").
set(DPREC_RELEASE_CUDA_ARCHITECTURES 75-real 80-real 86-real 89-real 90)
if(DEFINED CMAKE_CUDA_ARCHITECTURES AND NOT CMAKE_CUDA_ARCHITECTURES STREQUAL "")
  set(_dprec_arch_source "CMAKE_CUDA_ARCHITECTURES")
elseif(DPREC_CUDA_ARCHITECTURES STREQUAL "release")
  set(CMAKE_CUDA_ARCHITECTURES ${DPREC_RELEASE_CUDA_ARCHITECTURES})
  set(_dprec_arch_source "release")
elseif(DPREC_CUDA_ARCHITECTURES STREQUAL "auto")
  set(_dprec_gpu_caps "")
  find_program(DPREC_NVIDIA_SMI nvidia-smi)
  if(DPREC_NVIDIA_SMI)
    execute_process(COMMAND "${DPREC_NVIDIA_SMI}" --query-gpu=compute_cap --format=csv,noheader
                    OUTPUT_VARIABLE _dprec_smi_out RESULT_VARIABLE _dprec_smi_rc ERROR_QUIET TIMEOUT 20)
    if(_dprec_smi_rc EQUAL 0)
      string(REGEX MATCHALL "[0-9]+\\.[0-9]+" _dprec_caps_dotted "${_dprec_smi_out}")
      foreach(_cap IN LISTS _dprec_caps_dotted)
        string(REPLACE "." "" _cap "${_cap}")
        if(_cap LESS 75)
          message(WARNING "dprec: a GPU of compute capability ${_cap} is older than sm_75 and is not supported")
        else()
          list(APPEND _dprec_gpu_caps "${_cap}")
        endif()
      endforeach()
      list(REMOVE_DUPLICATES _dprec_gpu_caps)
    endif()
  endif()
  if(_dprec_gpu_caps)
    set(CMAKE_CUDA_ARCHITECTURES ${_dprec_gpu_caps})
    set(_dprec_arch_source "auto: the GPUs of this machine")
  else()
    set(CMAKE_CUDA_ARCHITECTURES 75-virtual)
    set(_dprec_arch_source "auto: no GPU found, PTX only (JIT-compiled on first use)")
  endif()
else()
  set(CMAKE_CUDA_ARCHITECTURES ${DPREC_CUDA_ARCHITECTURES})
  set(_dprec_arch_source "DPREC_CUDA_ARCHITECTURES")
endif()
message(STATUS "dprec: CUDA architectures ${CMAKE_CUDA_ARCHITECTURES} (${_dprec_arch_source})")
