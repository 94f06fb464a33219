# Checks the include arrows between folders (the Layout section of README.md): a folder includes
# project headers only from itself and the folders it links.
# Run as: cmake -DSOURCE_DIR=<repo> -P check_layering.cmake
set(allowed_engine/base "engine/base")
set(allowed_kernels "engine/base;kernels")
set(allowed_topology "engine/base;topology")
set(allowed_net "engine/base;net")
set(allowed_engine "engine;kernels;topology;net")
set(allowed_algorithms "engine;kernels;topology;algorithms")

set(violations "")
foreach(folder engine/base kernels topology net engine algorithms)
  file(GLOB_RECURSE files "${SOURCE_DIR}/${folder}/*.h" "${SOURCE_DIR}/${folder}/*.cc"
       "${SOURCE_DIR}/${folder}/*.cu" "${SOURCE_DIR}/${folder}/*.cuh")
  foreach(file ${files})
    file(RELATIVE_PATH rel "${SOURCE_DIR}" "${file}")
    # engine/base files are checked under their own, stricter rule only.
    if(folder STREQUAL "engine" AND rel MATCHES "^engine/base/")
      continue()
    endif()
    file(STRINGS "${file}" includes REGEX "^#include \"[^\"]+\"")
    foreach(line ${includes})
      string(REGEX REPLACE "^#include \"([^\"]+)\".*" "\\1" header "${line}")
      if(NOT header MATCHES "/")
        continue()  # a sibling header of the same folder
      endif()
      set(ok FALSE)
      set(allowed ${allowed_${folder}})
      # A binary's main (engine/peer_main.cc) and the Python module (engine/python/) sit above
      # the algorithms (they link them), whatever folder they live in.
      if(rel MATCHES "_main\\.cc$" OR rel MATCHES "^engine/python/")
        list(APPEND allowed algorithms)
      endif()
      foreach(prefix ${allowed})
        if(header MATCHES "^${prefix}/")
          set(ok TRUE)
        endif()
      endforeach()
      if(NOT ok)
        string(APPEND violations "  ${rel} includes \"${header}\" (${folder} may include: ${allowed})\n")
      endif()
    endforeach()
  endforeach()
endforeach()

if(violations)
  message(FATAL_ERROR "Include arrows of DESIGN.md violated:\n${violations}")
endif()
message(STATUS "include arrows OK")
