# Install rules. Two layouts:
#  - a wheel (scikit-build-core sets SKBUILD): one plain libflash4.so inside the Python package, where
#    python/flash4/_loader.py looks. No VERSION/SOVERSION there: wheels cannot hold the soname symlinks and
#    would carry three copies.
#  - everything else (cmake --install): the library with its soname, the headers, a CMake package that
#    exports flash4::flash4 for find_package(flash4 CONFIG), and a pkg-config file (flash4.pc).
if(SKBUILD)
  install(TARGETS flash4 LIBRARY DESTINATION flash4)
  return()
endif()

include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set_target_properties(flash4 PROPERTIES VERSION ${PROJECT_VERSION} SOVERSION ${PROJECT_VERSION_MAJOR})
install(TARGETS flash4 EXPORT flash4Targets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY include/flash4 DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})

set(FLASH4_CMAKE_PACKAGE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/flash4)
install(EXPORT flash4Targets NAMESPACE flash4:: DESTINATION ${FLASH4_CMAKE_PACKAGE_DIR})
configure_package_config_file(cmake/flash4Config.cmake.in ${PROJECT_BINARY_DIR}/flash4Config.cmake
                              INSTALL_DESTINATION ${FLASH4_CMAKE_PACKAGE_DIR})
# Before 1.0 a minor release may change the interface, so a request for 0.1 accepts 0.1.x only.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/flash4ConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/flash4Config.cmake ${PROJECT_BINARY_DIR}/flash4ConfigVersion.cmake
        DESTINATION ${FLASH4_CMAKE_PACKAGE_DIR})

# pkg-config: the prefix is found from the .pc file's own place, so `cmake --install --prefix DIR` and a copied
# tree work without reconfiguring.
set(FLASH4_PKGCONFIG_DIR ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
file(RELATIVE_PATH FLASH4_PKGCONFIG_TO_PREFIX /prefix/${FLASH4_PKGCONFIG_DIR} /prefix)
string(REGEX REPLACE "/$" "" FLASH4_PKGCONFIG_TO_PREFIX "${FLASH4_PKGCONFIG_TO_PREFIX}")
configure_file(cmake/flash4.pc.in ${PROJECT_BINARY_DIR}/flash4.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/flash4.pc DESTINATION ${FLASH4_PKGCONFIG_DIR})
