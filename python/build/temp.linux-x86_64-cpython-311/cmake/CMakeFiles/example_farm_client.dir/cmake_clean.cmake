file(REMOVE_RECURSE
  "CMakeFiles/example_farm_client.dir/examples/farm_client.c.o"
  "CMakeFiles/example_farm_client.dir/examples/farm_client.c.o.d"
  "examples/farm_client"
  "examples/farm_client.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/example_farm_client.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
