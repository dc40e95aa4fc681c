# Empty compiler generated dependencies file for shoal_bench.
# This may be replaced when dependencies are built.
