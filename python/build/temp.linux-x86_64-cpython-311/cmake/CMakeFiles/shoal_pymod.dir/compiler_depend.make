# Empty compiler generated dependencies file for shoal_pymod.
# This may be replaced when dependencies are built.
