# Builds and runs test/package/consumer against twheel used one way (VIA), from scratch in WORK.
#   cmake -DVIA=find_package|add_subdirectory|fetchcontent|pkg-config -DSOURCE=<twheel source>
#         -DWORK=<scratch dir> -DCXX=<compiler> -P run.cmake
# find_package and pkg-config first install twheel (library only) into WORK/prefix.
cmake_minimum_required(VERSION 3.20)
foreach(var VIA SOURCE WORK CXX)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "run.cmake: -D${var}=... is required")
  endif()
endforeach()

file(REMOVE_RECURSE ${WORK})
set(prefix ${WORK}/prefix)
set(consumer ${SOURCE}/test/package/consumer)

function(run)
  message(STATUS "run: ${ARGV}")
  execute_process(COMMAND ${ARGV} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGV}")
  endif()
endfunction()

if(VIA STREQUAL "find_package" OR VIA STREQUAL "pkg-config")
  # What a user does: configure, build and install twheel alone, nothing else.
  # pkg-config's install puts the library two levels deep, as Debian's multiarch libdir
  # (lib/x86_64-linux-gnu) does: the .pc file must find the prefix from there too.
  set(libdir_arg)
  if(VIA STREQUAL "pkg-config")
    set(libdir_arg -DCMAKE_INSTALL_LIBDIR=lib/multiarch)
  endif()
  run(${CMAKE_COMMAND} -S ${SOURCE} -B ${WORK}/twheel -DCMAKE_BUILD_TYPE=Release
      -DCMAKE_CXX_COMPILER=${CXX} -DTWHEEL_BUILD_TESTS=OFF -DTWHEEL_BUILD_EXAMPLES=OFF
      -DTWHEEL_BUILD_BENCH=OFF ${libdir_arg})
  run(${CMAKE_COMMAND} --build ${WORK}/twheel)
  run(${CMAKE_COMMAND} --install ${WORK}/twheel --prefix ${prefix})
  # Relocatable: the package must work from wherever the prefix ends up.
  file(RENAME ${prefix} ${WORK}/moved)
  set(prefix ${WORK}/moved)
endif()

if(VIA STREQUAL "pkg-config")
  find_program(pkg_config pkg-config REQUIRED)
  file(GLOB pc_dirs ${prefix}/lib*/pkgconfig ${prefix}/lib/*/pkgconfig)
  list(JOIN pc_dirs ":" pc_path)
  set(ENV{PKG_CONFIG_PATH} "${pc_path}")
  execute_process(COMMAND ${pkg_config} --cflags --libs twheel OUTPUT_VARIABLE flags
                  RESULT_VARIABLE rc OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "pkg-config does not know twheel (looked in ${pc_path})")
  endif()
  separate_arguments(flags UNIX_COMMAND "${flags}")
  file(MAKE_DIRECTORY ${WORK}/consumer)
  run(${CXX} -std=c++17 -O1 ${consumer}/main.cpp -o ${WORK}/consumer/consumer ${flags})
else()
  set(args -DTWHEEL_VIA=${VIA} -DCMAKE_CXX_COMPILER=${CXX} -DCMAKE_BUILD_TYPE=Release)
  if(VIA STREQUAL "find_package")
    list(APPEND args -DCMAKE_PREFIX_PATH=${prefix})
  else()
    list(APPEND args -DTWHEEL_SOURCE=${SOURCE})
  endif()
  run(${CMAKE_COMMAND} -S ${consumer} -B ${WORK}/consumer ${args})
  run(${CMAKE_COMMAND} --build ${WORK}/consumer)
endif()

run(${WORK}/consumer/consumer)
file(REMOVE_RECURSE ${WORK})
