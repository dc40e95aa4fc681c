file(REMOVE_RECURSE
  "CMakeFiles/hackysack.dir/bench/main_hackysack.c.o"
  "CMakeFiles/hackysack.dir/bench/main_hackysack.c.o.d"
  "bench/hackysack"
  "bench/hackysack.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/hackysack.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
