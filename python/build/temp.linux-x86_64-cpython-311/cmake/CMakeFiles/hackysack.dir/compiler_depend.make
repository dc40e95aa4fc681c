# Empty compiler generated dependencies file for hackysack.
# This may be replaced when dependencies are built.
