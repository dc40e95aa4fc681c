# Empty dependencies file for shoal.
# This may be replaced when dependencies are built.
