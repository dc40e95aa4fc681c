file(REMOVE_RECURSE
  "CMakeFiles/shoal_bench.dir/bench/bench.c.o"
  "CMakeFiles/shoal_bench.dir/bench/bench.c.o.d"
  "CMakeFiles/shoal_bench.dir/bench/suite_fibers.c.o"
  "CMakeFiles/shoal_bench.dir/bench/suite_fibers.c.o.d"
  "CMakeFiles/shoal_bench.dir/bench/suite_pystore.c.o"
  "CMakeFiles/shoal_bench.dir/bench/suite_pystore.c.o.d"
  "CMakeFiles/shoal_bench.dir/bench/suite_ring.c.o"
  "CMakeFiles/shoal_bench.dir/bench/suite_ring.c.o.d"
  "CMakeFiles/shoal_bench.dir/bench/suite_rpc.c.o"
  "CMakeFiles/shoal_bench.dir/bench/suite_rpc.c.o.d"
  "CMakeFiles/shoal_bench.dir/bench/suite_store.c.o"
  "CMakeFiles/shoal_bench.dir/bench/suite_store.c.o.d"
  "CMakeFiles/shoal_bench.dir/bench/suite_tasks.c.o"
  "CMakeFiles/shoal_bench.dir/bench/suite_tasks.c.o.d"
  "libshoal_bench.a"
  "libshoal_bench.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/shoal_bench.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
