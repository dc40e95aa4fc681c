# Empty compiler generated dependencies file for shoald.
# This may be replaced when dependencies are built.
