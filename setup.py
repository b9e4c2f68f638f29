"""Build the native core: every `_native/<name>.pyx` becomes `engine._native.<name>`.

Each .pyx lists the C files it links in a `# distutils: sources = _native/src/...` header line.
A `_native/<name>.pxd` next to a .pyx shares its C-level declarations with the other modules,
which cimport it as `engine._native.<name>`: Cython looks that up as `engine/_native/<name>.pxd`
on its include path, so the build mirrors those .pxd files into such a tree under build/.

CPU-specific code (SSE4.2, PCLMULQDQ, AVX-512 VPCLMULQDQ, ARMv8 CRC) is chosen at run time
inside the C sources through function target attributes, so the build itself stays portable:
no -march flag is ever passed.

ENGINE_NATIVE_ONLY=name1,name2 limits the build to some modules (handy while iterating).
ENGINE_NATIVE_DEBUG=1 builds with -O0 -g and assertions.
"""
import os
import shutil
import sys
from glob import glob

import numpy
from Cython.Build import cythonize
from setuptools import Extension, setup

HERE = os.path.dirname(os.path.abspath(__file__))
NATIVE = "_native"
DEBUG = os.environ.get("ENGINE_NATIVE_DEBUG") == "1"
ONLY = {n for n in os.environ.get("ENGINE_NATIVE_ONLY", "").split(",") if n}

if sys.platform == "win32":
    COMPILE_ARGS = ["/O2"]
else:
    COMPILE_ARGS = ["-O0", "-g", "-UNDEBUG"] if DEBUG else ["-O3", "-g0"]
    COMPILE_ARGS += ["-std=gnu11", "-fno-strict-aliasing", "-Wall", "-Wno-unused-function",
                     "-Wno-unreachable-code"]


def mirror_pxds():
    """Copies every `_native/<name>.pxd` that belongs to a module to
    build/pxd/engine/_native/, where a qualified cimport finds it; returns build/pxd."""
    root = os.path.join(HERE, "build", "pxd")
    tree = os.path.join(root, "engine", "_native")
    os.makedirs(tree, exist_ok=True)
    for pxd in glob(os.path.join(NATIVE, "*.pxd")):
        if os.path.exists(pxd[:-4] + ".pyx"):
            shutil.copy2(pxd, tree)
    return root


def extensions():
    exts = []
    for pyx in sorted(glob(os.path.join(NATIVE, "*.pyx"))):
        name = os.path.splitext(os.path.basename(pyx))[0]
        if ONLY and name not in ONLY:
            continue
        exts.append(Extension(
            f"engine._native.{name}",
            sources=[pyx],  # C sources: each .pyx names its own (# distutils: sources = ...)
            include_dirs=[os.path.join(NATIVE, "include"), NATIVE, numpy.get_include()],
            define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
            extra_compile_args=COMPILE_ARGS,
        ))
    return exts


setup(
    ext_modules=cythonize(
        extensions(),
        language_level=3,
        include_path=[NATIVE, mirror_pxds()],
        compiler_directives={
            "boundscheck": DEBUG, "wraparound": False, "cdivision": True,
            "initializedcheck": DEBUG, "embedsignature": True,
        },
        build_dir="build/cython",
    ),
)
