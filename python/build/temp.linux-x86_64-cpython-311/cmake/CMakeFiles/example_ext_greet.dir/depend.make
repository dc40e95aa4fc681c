# Empty dependencies file for example_ext_greet.
# This may be replaced when dependencies are built.
