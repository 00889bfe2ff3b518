# pip builds every install in a new isolated environment, so pybind11's headers come from a
# new path each time, the compile commands change and every binding recompiles (about 3/4
# of a CPU build). The bindings compile against a copy under the build directory instead.
# configure_file writes a header only when its content changes, so a rebuild from the same
# checkout finds the same commands and the same timestamps, and recompiles nothing.
if(NOT pybind11_INCLUDE_DIR OR NOT EXISTS "${pybind11_INCLUDE_DIR}/pybind11/pybind11.h")
  message(STATUS "dprec: pybind11's headers used in place (pybind11_INCLUDE_DIR not found)")
  return()
endif()
set(_dprec_stable_include "${CMAKE_BINARY_DIR}/pybind11-include")
file(GLOB_RECURSE _dprec_pybind11_headers RELATIVE "${pybind11_INCLUDE_DIR}" "${pybind11_INCLUDE_DIR}/pybind11/*")
foreach(_header IN LISTS _dprec_pybind11_headers)
  configure_file("${pybind11_INCLUDE_DIR}/${_header}" "${_dprec_stable_include}/${_header}" COPYONLY)
endforeach()
# The imported target that carries the include directory (pybind11 3.x puts it one level down).
foreach(_target pybind11::pybind11_headers pybind11::headers)
  if(TARGET ${_target})
    get_target_property(_dirs ${_target} INTERFACE_INCLUDE_DIRECTORIES)
    if(_dirs)
      set(_new_dirs "")
      foreach(_dir IN LISTS _dirs)
        if(_dir STREQUAL pybind11_INCLUDE_DIR)
          set(_dir "${_dprec_stable_include}")
        endif()
        list(APPEND _new_dirs "${_dir}")
      endforeach()
      set_property(TARGET ${_target} PROPERTY INTERFACE_INCLUDE_DIRECTORIES "${_new_dirs}")
    endif()
  endif()
endforeach()
