file(REMOVE_RECURSE
  "CMakeFiles/shoal-ext.dir/tools/shoal-ext.c.o"
  "CMakeFiles/shoal-ext.dir/tools/shoal-ext.c.o.d"
  "tools/shoal-ext"
  "tools/shoal-ext.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang ASM C)
  include(CMakeFiles/shoal-ext.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
