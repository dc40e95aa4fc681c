file(REMOVE_RECURSE
  "CMakeFiles/example_farm_funcs.dir/examples/farm_funcs.c.o"
  "CMakeFiles/example_farm_funcs.dir/examples/farm_funcs.c.o.d"
  "examples/farm_funcs.pdb"
  "examples/farm_funcs.so"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/example_farm_funcs.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
