file(REMOVE_RECURSE
  "CMakeFiles/shoal_tools.dir/tools/lib/cli.c.o"
  "CMakeFiles/shoal_tools.dir/tools/lib/cli.c.o.d"
  "CMakeFiles/shoal_tools.dir/tools/lib/daemon.c.o"
  "CMakeFiles/shoal_tools.dir/tools/lib/daemon.c.o.d"
  "libshoal_tools.a"
  "libshoal_tools.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/shoal_tools.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
