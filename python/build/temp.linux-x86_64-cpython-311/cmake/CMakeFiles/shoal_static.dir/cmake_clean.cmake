file(REMOVE_RECURSE
  "libshoal.a"
  "libshoal.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang ASM C)
  include(CMakeFiles/shoal_static.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
