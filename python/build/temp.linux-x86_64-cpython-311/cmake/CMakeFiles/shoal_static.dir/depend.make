# Empty dependencies file for shoal_static.
# This may be replaced when dependencies are built.
