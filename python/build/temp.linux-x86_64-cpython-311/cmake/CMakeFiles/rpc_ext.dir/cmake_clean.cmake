file(REMOVE_RECURSE
  "CMakeFiles/rpc_ext.dir/bench/ext/rpc_ext.c.o"
  "CMakeFiles/rpc_ext.dir/bench/ext/rpc_ext.c.o.d"
  "bench/rpc_ext.pdb"
  "bench/rpc_ext.so"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/rpc_ext.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
