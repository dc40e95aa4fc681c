# Empty dependencies file for shoal-engine.
# This may be replaced when dependencies are built.
