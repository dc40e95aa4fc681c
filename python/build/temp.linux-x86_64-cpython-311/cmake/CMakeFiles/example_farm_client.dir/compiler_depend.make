# Empty compiler generated dependencies file for example_farm_client.
# This may be replaced when dependencies are built.
