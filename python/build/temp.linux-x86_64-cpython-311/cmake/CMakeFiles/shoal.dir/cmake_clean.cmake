file(REMOVE_RECURSE
  "CMakeFiles/shoal.dir/tools/shoal.c.o"
  "CMakeFiles/shoal.dir/tools/shoal.c.o.d"
  "tools/shoal"
  "tools/shoal.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/shoal.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
