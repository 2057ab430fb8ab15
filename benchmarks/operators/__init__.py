"""Deep-learning operator benchmark: polycomp against onnxruntime (python -m benchmarks.operators)."""
