file(REMOVE_RECURSE
  "CMakeFiles/hackysack-boost.dir/bench/peer/hackysack_boost.c.o"
  "CMakeFiles/hackysack-boost.dir/bench/peer/hackysack_boost.c.o.d"
  "bench/hackysack-boost"
  "bench/hackysack-boost.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/hackysack-boost.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
