#!/bin/sh
# The wheels a session lent a GPU carries to the device machine (benchmarks/gpu.py's
# module doc has the whole recipe): polycomp's dependencies that the machine's python3
# (CPython 3.12, x86-64, no network) lacks. Run here, in the repository's root:
#
#     sh benchmarks/gpu_wheels.sh [folder]        # default .whl, about 3 MB
#
# The pins are the versions polycomp was tested with when this was written; the device
# machine already has numpy, typing_extensions, pytest, hypothesis and setuptools.
set -eu
dest=${1:-.whl}
mkdir -p "$dest"
for wheel in islpy==2026.2.2 pytools==2026.1.1 pycparser==3.0 platformdirs==4.14.8 \
             siphash24==1.9; do
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
        --implementation cp --platform manylinux_2_28_x86_64 \
        --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d "$dest" "$wheel"
done
# cgen publishes only an sdist; it is pure Python, so a wheel built here runs there
python3 -m pip wheel -q --no-deps -w "$dest" cgen==2025.1
ls "$dest"
