#----------------------------------------------------------------
# Generated CMake target import file for configuration "Release".
#----------------------------------------------------------------

# Commands may need to know the format version.
set(CMAKE_IMPORT_FILE_VERSION 1)

# Import target "shoal::shoal_static" for configuration "Release"
set_property(TARGET shoal::shoal_static APPEND PROPERTY IMPORTED_CONFIGURATIONS RELEASE)
set_target_properties(shoal::shoal_static PROPERTIES
  IMPORTED_LINK_INTERFACE_LANGUAGES_RELEASE "ASM;C"
  IMPORTED_LOCATION_RELEASE "${_IMPORT_PREFIX}/lib/libshoal.a"
  )

list(APPEND _cmake_import_check_targets shoal::shoal_static )
list(APPEND _cmake_import_check_files_for_shoal::shoal_static "${_IMPORT_PREFIX}/lib/libshoal.a" )

# Import target "shoal::shoal_shared" for configuration "Release"
set_property(TARGET shoal::shoal_shared APPEND PROPERTY IMPORTED_CONFIGURATIONS RELEASE)
set_target_properties(shoal::shoal_shared PROPERTIES
  IMPORTED_LOCATION_RELEASE "${_IMPORT_PREFIX}/lib/libshoal.so.0.1.0"
  IMPORTED_SONAME_RELEASE "libshoal.so.0"
  )

list(APPEND _cmake_import_check_targets shoal::shoal_shared )
list(APPEND _cmake_import_check_files_for_shoal::shoal_shared "${_IMPORT_PREFIX}/lib/libshoal.so.0.1.0" )

# Commands beyond this point should not need to know the version.
set(CMAKE_IMPORT_FILE_VERSION)
