"""PolyBench/C 4.2-style benchmark suite for polycomp.

Run it with ``python -m benchmarks.polybench --help``.  Modules:

* ``defs``    -- the 30 kernels (:class:`defs.KernelDef`, ``defs.KERNELS``)
* ``compare`` -- the output tolerance rule
* ``peers``   -- gcc / clang-19+Polly builds loaded with ctypes
* ``runner``  -- timing, checking, the command line
* ``report``  -- markdown / CSV / PNG output and geometric means
"""
