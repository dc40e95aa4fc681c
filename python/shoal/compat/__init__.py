"""Drop-in modules for programs written against other libraries: each maps one
library's names onto shoal's own API, so that a program runs with only its import
lines changed::

    import shoal.compat.vineyard as vineyard
    from shoal.compat.pyisolate import ExtensionManager, ExtensionBase
    import shoal.compat.ipyparallel as ipp

Each module's docstring lists what it does not cover; a call outside what it covers
raises ``NotImplementedError`` naming the shoal call to use instead, never a silent
difference.
"""
