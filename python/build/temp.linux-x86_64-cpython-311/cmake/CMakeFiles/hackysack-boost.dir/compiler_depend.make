# Empty compiler generated dependencies file for hackysack-boost.
# This may be replaced when dependencies are built.
