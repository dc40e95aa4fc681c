# Empty compiler generated dependencies file for example_ext_host.
# This may be replaced when dependencies are built.
