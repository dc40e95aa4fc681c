file(REMOVE_RECURSE
  "CMakeFiles/example_ext_host.dir/examples/ext_host.c.o"
  "CMakeFiles/example_ext_host.dir/examples/ext_host.c.o.d"
  "examples/ext_host"
  "examples/ext_host.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/example_ext_host.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
