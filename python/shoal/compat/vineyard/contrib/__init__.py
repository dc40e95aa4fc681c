"""vineyard.contrib on shoal: only ``contrib.ml.torch`` (``torch_context``) is covered."""
