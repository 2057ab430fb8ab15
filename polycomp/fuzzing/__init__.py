"""polycomp's differential fuzzer: random programs and options against oracles outside polycomp.

Place in the pipeline: beside it. ``loopgen`` writes random affine C loop nests and
``tcgen`` random Tensor Comprehensions defs (with a numpy interpreter as their oracle);
``oracle`` compiles the C with plain ``gcc -O0`` and calls it through ctypes;
``harness`` samples Options, runs each case in a ``worker`` child process with a time
limit and classifies the outcome; ``minimize`` shrinks a failing case; ``campaign`` runs
cases for a while and writes the findings (``python -m polycomp.fuzzing --help``).
tests/test_differential_fuzz.py runs a fixed, short campaign in CI.
"""
