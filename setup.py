# SPDX-License-Identifier: Apache-2.0
"""The compiled core of pyxdp.xsk (pyxdp/xsk/_core.c). Optional: where no C
compiler or Python headers exist the install goes on without it, and
pyxdp.xsk.core uses its slower numpy path (docs/spec.md §8.1)."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("pyxdp.xsk._core", ["pyxdp/xsk/_core.c"],
                             extra_compile_args=["-O2", "-std=gnu11"], optional=True)])
