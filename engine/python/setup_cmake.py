"""setuptools commands that build the Python package gossamer with CMake (used by the root
setup.py, so that `pip install .` works; see engine/python/README.md).

The wheel holds what the CMake target gossamer_python puts in <build>/python/gossamer/: the
native module _gossamer and the package's .py files. The build directory is GOSSAMER_BUILD_DIR
when set (configured there first if it is not yet: reuse one to make installs fast), else a
temporary one. CMAKE_ARGS (e.g. "-DGOSSAMER_WITH_CUDA=OFF") goes to a fresh configuration.
setuptools' own build and egg-info directories go to a temporary directory, not the source tree.
"""

import atexit
import glob
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile

from setuptools import Distribution
from setuptools.command.build_py import build_py

SOURCE_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PACKAGE_SOURCES = os.path.join(SOURCE_DIR, "engine", "python", "gossamer")


class BuildError(SystemExit):
    """A failed build, told as one sentence (pip prints it)."""

    def __init__(self, message):
        super().__init__("gossamer: " + message)


def version():
    """The project's version, from project(... VERSION x.y.z) in the top-level CMakeLists.txt."""
    with open(os.path.join(SOURCE_DIR, "CMakeLists.txt")) as f:
        match = re.search(r"project\(\s*gossamer\s+VERSION\s+([0-9.]+)", f.read())
    if not match:
        raise BuildError("no project(gossamer VERSION x.y.z) in %s/CMakeLists.txt" % SOURCE_DIR)
    return match.group(1)


def scratch_dir(prefix):
    path = tempfile.mkdtemp(prefix=prefix)
    atexit.register(shutil.rmtree, path, True)
    return path


def run(command, what):
    print("gossamer: %s: %s" % (what, " ".join(shlex.quote(c) for c in command)), flush=True)
    try:
        subprocess.run(command, check=True)
    except FileNotFoundError:
        raise BuildError("%s needs %s, which is not installed (Debian: cmake)" % (what, command[0]))
    except subprocess.CalledProcessError as e:
        raise BuildError("%s failed (exit %d); its output is above" % (what, e.returncode))


def configure(build_dir):
    command = ["cmake", "-S", SOURCE_DIR, "-B", build_dir, "-DCMAKE_BUILD_TYPE=Release",
               "-DGOSSAMER_WITH_PYTHON=ON", "-DPython_EXECUTABLE=" + sys.executable]
    if shutil.which("ninja"):
        command += ["-G", "Ninja"]
    command += shlex.split(os.environ.get("CMAKE_ARGS", ""))
    run(command, "configuring " + build_dir)


def build_module():
    """Builds gossamer_python; returns the directory of the package it made."""
    build_dir = os.environ.get("GOSSAMER_BUILD_DIR") or scratch_dir("gossamer-cmake-")
    build_dir = os.path.abspath(build_dir)
    if not os.path.exists(os.path.join(build_dir, "CMakeCache.txt")):
        configure(build_dir)
    elif not os.path.isdir(os.path.join(build_dir, "engine", "python")):
        raise BuildError(
            "GOSSAMER_BUILD_DIR=%s has no Python module: its configuration found no Python headers "
            "or pybind11 (Debian: python3-dev, pybind11-dev) or has GOSSAMER_WITH_PYTHON=OFF" % build_dir)
    jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL") or str(os.cpu_count() or 1)
    run(["cmake", "--build", build_dir, "--target", "gossamer_python", "-j", jobs], "building the module")
    package = os.path.join(build_dir, "python", "gossamer")
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    if not os.path.exists(os.path.join(package, "_gossamer" + suffix)):
        built = [os.path.basename(p) for p in glob.glob(os.path.join(package, "_gossamer*"))]
        raise BuildError(
            "%s holds %s, not _gossamer%s for this Python (%s): configure that build with "
            "-DPython_EXECUTABLE=%s, or unset GOSSAMER_BUILD_DIR"
            % (package, built or "no module", suffix, sys.executable, sys.executable))
    return package


class BuildPyWithCMake(build_py):
    """build_py that builds the package with CMake and copies it into the wheel's tree."""

    def run(self):
        super().run()
        package = build_module()
        target = os.path.join(self.build_lib, "gossamer")
        os.makedirs(target, exist_ok=True)
        names = [os.path.basename(p) for p in glob.glob(os.path.join(PACKAGE_SOURCES, "*.py"))]
        names.append("_gossamer" + sysconfig.get_config_var("EXT_SUFFIX"))
        for name in sorted(names):
            source = os.path.join(package, name)
            if not os.path.exists(source):
                raise BuildError("the build made no %s (is it in GOSSAMER_PYTHON_SOURCES of "
                                 "engine/python/CMakeLists.txt?)" % source)
            self.copy_file(source, os.path.join(target, name))


class BinaryDistribution(Distribution):
    """The wheel holds a native module: tagged for this Python and platform, not pure."""

    def has_ext_modules(self):
        return True


def setup_arguments():
    """The keyword arguments of setuptools.setup() for gossamer (the rest is in pyproject.toml)."""
    scratch = scratch_dir("gossamer-setuptools-")
    return {
        "version": version(),
        # build_py runs only for a distribution with packages; BuildPyWithCMake then puts the
        # CMake build's package (the .py files and the native module) in the wheel's tree.
        "packages": ["gossamer"],
        "package_dir": {"gossamer": os.path.relpath(PACKAGE_SOURCES, SOURCE_DIR)},
        "distclass": BinaryDistribution,
        "cmdclass": {"build_py": BuildPyWithCMake},
        "options": {"build": {"build_base": os.path.join(scratch, "build")},
                    "egg_info": {"egg_base": scratch}},
        "zip_safe": False,
    }
