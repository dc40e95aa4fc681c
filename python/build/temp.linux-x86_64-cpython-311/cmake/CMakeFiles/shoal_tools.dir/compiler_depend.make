# Empty compiler generated dependencies file for shoal_tools.
# This may be replaced when dependencies are built.
