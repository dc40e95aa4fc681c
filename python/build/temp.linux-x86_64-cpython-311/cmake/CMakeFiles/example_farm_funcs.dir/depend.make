# Empty dependencies file for example_farm_funcs.
# This may be replaced when dependencies are built.
