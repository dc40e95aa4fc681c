
# Consider dependencies only in project.
set(CMAKE_DEPENDS_IN_PROJECT_ONLY OFF)

# The set of languages for which implicit dependencies are needed:
set(CMAKE_DEPENDS_LANGUAGES
  )

# The set of dependency files which are needed:
set(CMAKE_DEPENDS_DEPENDENCY_FILES
  "/work/main/bench/bench.c" "CMakeFiles/shoal_bench.dir/bench/bench.c.o" "gcc" "CMakeFiles/shoal_bench.dir/bench/bench.c.o.d"
  "/work/main/bench/suite_fibers.c" "CMakeFiles/shoal_bench.dir/bench/suite_fibers.c.o" "gcc" "CMakeFiles/shoal_bench.dir/bench/suite_fibers.c.o.d"
  "/work/main/bench/suite_pystore.c" "CMakeFiles/shoal_bench.dir/bench/suite_pystore.c.o" "gcc" "CMakeFiles/shoal_bench.dir/bench/suite_pystore.c.o.d"
  "/work/main/bench/suite_ring.c" "CMakeFiles/shoal_bench.dir/bench/suite_ring.c.o" "gcc" "CMakeFiles/shoal_bench.dir/bench/suite_ring.c.o.d"
  "/work/main/bench/suite_rpc.c" "CMakeFiles/shoal_bench.dir/bench/suite_rpc.c.o" "gcc" "CMakeFiles/shoal_bench.dir/bench/suite_rpc.c.o.d"
  "/work/main/bench/suite_store.c" "CMakeFiles/shoal_bench.dir/bench/suite_store.c.o" "gcc" "CMakeFiles/shoal_bench.dir/bench/suite_store.c.o.d"
  "/work/main/bench/suite_tasks.c" "CMakeFiles/shoal_bench.dir/bench/suite_tasks.c.o" "gcc" "CMakeFiles/shoal_bench.dir/bench/suite_tasks.c.o.d"
  )

# Targets to which this target links.
set(CMAKE_TARGET_LINKED_INFO_FILES
  "/work/main/python/build/temp.linux-x86_64-cpython-311/cmake/CMakeFiles/shoal_static.dir/DependInfo.cmake"
  )

# Fortran module output directory.
set(CMAKE_Fortran_TARGET_MODULE_DIR "")
