file(REMOVE_RECURSE
  "CMakeFiles/shoald.dir/tools/shoald.c.o"
  "CMakeFiles/shoald.dir/tools/shoald.c.o.d"
  "tools/shoald"
  "tools/shoald.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/shoald.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
