"""`pip install .` builds the Python package gossamer with CMake: the setuptools commands are in
engine/python/setup_cmake.py, the project's metadata in pyproject.toml."""

import os
import sys

sys.dont_write_bytecode = True  # no __pycache__ left in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "engine", "python"))

from setuptools import setup  # noqa: E402

import setup_cmake  # noqa: E402

setup(**setup_cmake.setup_arguments())
