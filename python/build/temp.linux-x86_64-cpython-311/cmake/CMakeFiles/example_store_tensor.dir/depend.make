# Empty dependencies file for example_store_tensor.
# This may be replaced when dependencies are built.
