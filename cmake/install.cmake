# Install rules: headers, the library, a relocatable CMake package (twheel::twheel, Boost
# found for the consumer through find_dependency) and a pkg-config file.
include(CMakePackageConfigHelpers)

set(twheel_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/twheel)

install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/twheel
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT twheel_development)
install(TARGETS twheel EXPORT twheel_targets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT twheel_development
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT twheel_runtime
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT twheel_runtime
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT twheel_targets
  FILE twheelTargets.cmake
  NAMESPACE twheel::
  DESTINATION ${twheel_cmake_dir} COMPONENT twheel_development)

configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/twheelConfig.cmake.in
  ${PROJECT_BINARY_DIR}/twheelConfig.cmake
  INSTALL_DESTINATION ${twheel_cmake_dir})
# A consumer asking for 0.1 accepts 0.1.z only (a 0.y release may break it); from 1.0,
# any 1.y >= the one asked for.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/twheelConfigVersion.cmake
  COMPATIBILITY ${twheel_compatibility})
install(FILES ${PROJECT_BINARY_DIR}/twheelConfig.cmake ${PROJECT_BINARY_DIR}/twheelConfigVersion.cmake
  DESTINATION ${twheel_cmake_dir} COMPONENT twheel_development)

# The .pc file finds the prefix from where it is (relocatable): as many levels up as the
# libdir has, plus pkgconfig's (lib/x86_64-linux-gnu is two, as installed to /usr on
# Debian). An absolute libdir or includedir is written as it is.
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}" OR IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}")
  set(twheel_pc_prefix "${CMAKE_INSTALL_PREFIX}")
else()
  file(RELATIVE_PATH twheel_pc_up "/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/")
  string(REGEX REPLACE "/$" "" twheel_pc_up "${twheel_pc_up}")
  set(twheel_pc_prefix "\${pcfiledir}/${twheel_pc_up}")
endif()
set(twheel_pc_libdir "${CMAKE_INSTALL_LIBDIR}")
set(twheel_pc_includedir "${CMAKE_INSTALL_INCLUDEDIR}")
foreach(dir twheel_pc_libdir twheel_pc_includedir)
  if(NOT IS_ABSOLUTE "${${dir}}")
    set(${dir} "\${prefix}/${${dir}}")
  endif()
endforeach()
configure_file(${PROJECT_SOURCE_DIR}/cmake/twheel.pc.in ${PROJECT_BINARY_DIR}/twheel.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/twheel.pc
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig COMPONENT twheel_development)
