# No Python-level names: the column buffers and their appends are C-level, cimported by
# engine._native.columnar (declared in _native/columns.pxd).
