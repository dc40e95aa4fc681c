# Empty dependencies file for shoal-ext.
# This may be replaced when dependencies are built.
