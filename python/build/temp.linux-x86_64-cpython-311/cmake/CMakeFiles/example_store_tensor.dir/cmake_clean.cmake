file(REMOVE_RECURSE
  "CMakeFiles/example_store_tensor.dir/examples/store_tensor.c.o"
  "CMakeFiles/example_store_tensor.dir/examples/store_tensor.c.o.d"
  "examples/store_tensor"
  "examples/store_tensor.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/example_store_tensor.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
