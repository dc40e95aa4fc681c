# Empty compiler generated dependencies file for shoal_obj.
# This may be replaced when dependencies are built.
