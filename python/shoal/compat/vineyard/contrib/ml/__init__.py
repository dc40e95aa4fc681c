"""vineyard.contrib.ml on shoal: only ``torch`` (``torch_context``) is covered."""
