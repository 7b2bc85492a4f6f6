"""The one compiled part of autosync: DBW's (17) by exact recursive partitioning
(autosync/policies/dbw/_eq17_partition.c). It is optional: where it does not build (no C compiler or no
Python headers) the install goes on and DBW uses the pure-Python structured solver (autosync/policies/dbw/_isotonic.py)."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("autosync.policies.dbw._eq17_partition", ["autosync/policies/dbw/_eq17_partition.c"],
                             extra_compile_args=["-O2"], optional=True)])
