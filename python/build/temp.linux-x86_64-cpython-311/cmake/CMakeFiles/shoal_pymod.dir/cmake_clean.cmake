file(REMOVE_RECURSE
  "CMakeFiles/shoal_pymod.dir/python/_shoal/client.c.o"
  "CMakeFiles/shoal_pymod.dir/python/_shoal/client.c.o.d"
  "CMakeFiles/shoal_pymod.dir/python/_shoal/module.c.o"
  "CMakeFiles/shoal_pymod.dir/python/_shoal/module.c.o.d"
  "CMakeFiles/shoal_pymod.dir/python/_shoal/object.c.o"
  "CMakeFiles/shoal_pymod.dir/python/_shoal/object.c.o.d"
  "python/shoal/_shoal.cpython-311-x86_64-linux-gnu.so"
  "python/shoal/_shoal.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/shoal_pymod.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
