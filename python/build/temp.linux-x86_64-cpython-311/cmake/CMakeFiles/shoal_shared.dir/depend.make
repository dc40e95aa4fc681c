# Empty dependencies file for shoal_shared.
# This may be replaced when dependencies are built.
