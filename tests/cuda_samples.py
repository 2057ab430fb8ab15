"""Hand-written CUDA shared by the header's tests (test_cuda_emulation.py) and the nvcc
checks (test_nvcc.py): a vector add's host entry written with polycomp_cuda.h's host
macros, as the generated code writes them (it launches a ``vadd`` kernel the including
source defines)."""

VADD_HOST = """\
extern "C" int polycomp_vadd(long n, const float *a, const float *b, float *c) {
    float *da = nullptr, *db = nullptr, *dc = nullptr;
    size_t bytes = n * sizeof(float);
    POLYCOMP_ALLOC(da, bytes);
    POLYCOMP_ALLOC(db, bytes);
    POLYCOMP_ALLOC(dc, bytes);
    POLYCOMP_COPY_IN(da, a, bytes);
    POLYCOMP_COPY_IN(db, b, bytes);
    POLYCOMP_LAUNCH(vadd, dim3((n + 127) / 128), dim3(128), da, db, dc, n);
    POLYCOMP_LAUNCH_CHECK();
    POLYCOMP_SYNC();
    POLYCOMP_COPY_OUT(c, dc, bytes);
    POLYCOMP_FREE(da);
    POLYCOMP_FREE(db);
    POLYCOMP_FREE(dc);
    return 0;
}
"""
