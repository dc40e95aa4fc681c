file(REMOVE_RECURSE
  "CMakeFiles/example_ext_greet.dir/examples/ext_greet.c.o"
  "CMakeFiles/example_ext_greet.dir/examples/ext_greet.c.o.d"
  "examples/ext_greet.pdb"
  "examples/ext_greet.so"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/example_ext_greet.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
