file(REMOVE_RECURSE
  "CMakeFiles/shoal-engine.dir/tools/shoal-engine.c.o"
  "CMakeFiles/shoal-engine.dir/tools/shoal-engine.c.o.d"
  "tools/shoal-engine"
  "tools/shoal-engine.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang ASM C)
  include(CMakeFiles/shoal-engine.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
