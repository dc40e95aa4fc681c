# Empty dependencies file for rpc_ext.
# This may be replaced when dependencies are built.
