"""Shared pytest fixtures."""

import os
import sys

import pytest

_TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
if _TESTS_DIR not in sys.path:  # lets test modules `import vectors` under any import mode
    sys.path.insert(0, _TESTS_DIR)


@pytest.fixture(scope="session")
def VECTORS():
    """The read-only conformance vectors, `<repo>/../shared/vectors` (see tests/vectors.py)."""
    import vectors

    if not vectors.VECTORS.is_dir():  # a missing checkout must fail loudly, never skip
        pytest.fail(f"conformance vectors not found at {vectors.VECTORS}")
    return vectors.VECTORS
