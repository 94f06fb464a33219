"""Imports gossamer (and NumPy), or skips the calling test module saying why."""

import pytest

np = pytest.importorskip("numpy", reason="NumPy is not installed (Debian: python3-numpy)")
gossamer = pytest.importorskip(
    "gossamer",
    reason="the gossamer module was not built (needs python3-dev and pybind11-dev; "
    "GOSSAMER_WITH_PYTHON) or PYTHONPATH does not name <build>/python",
)
