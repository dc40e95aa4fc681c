file(REMOVE_RECURSE
  "libshoal.pdb"
  "libshoal.so"
  "libshoal.so.0"
  "libshoal.so.0.1.0"
)

# Per-language clean rules from dependency scanning.
foreach(lang ASM C)
  include(CMakeFiles/shoal_shared.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
