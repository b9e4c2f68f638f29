"""Compiled kernels built from the top-level `_native/` sources (see setup.py).

Nothing here imports from the rest of `engine`: these modules take buffers and return
buffers, numpy arrays or small values. Import them through the thin public modules
(`engine.records`, `engine.log`, `engine.errors`) rather than directly.
"""
