/* The cuBLAS baseline of `train --bench` (src/gpu/gpu_blas.c), its own
 * program so that its own row in ci/gpu-check.sh says what it is: a machine
 * without cuBLAS (torch's wheels without nvidia-cublas, a bare driver) is a
 * SKIP of this row only, never of the digest suite (tests/gpu/check_cuda).
 * The trainer's row-major products through cuBLAS give the reference GEMM's,
 * so the prototypes restated there and the transposes hold on a real
 * cuBLAS. Exit 0 all passed, 1 a failure, 77 no GPU or no cuBLAS (says why).
 *   check_cublas */
#include "detcheck.h"
#include "gpu/gpu_blas.h"
#include "gpu/gpu.h"

#include <stdio.h>

int main(void) {
    int n = 0;
    if (dck_gpu_device_count(&n) != DCK_OK) {
        printf("check_cublas: skipped: %s\n", dck_last_error());
        return 77;
    }
    const size_t shapes[][3] = {{37, 19, 53}, {5, 64, 192}, {128, 256, 64}, {1, 3, 2}};
    int failures = 0;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        double err = 0;
        dck_status s = dck_blas_cuda_selftest(shapes[i][0], shapes[i][1], shapes[i][2], &err);
        if (s == DCK_ERR_NODEVICE) {
            printf("check_cublas: skipped: %s\n", dck_last_error());
            return 77;
        }
        int ok = s == DCK_OK && err <= 1e-4;
        printf("%s cuBLAS products %zu x %zu -> %zu: relative error %.3g%s%s\n", ok ? "ok  " : "FAIL",
               shapes[i][0], shapes[i][1], shapes[i][2], err, s ? ": " : "",
               s ? dck_last_error() : "");
        failures += !ok;
    }
    /* the TF32 row's math mode is accepted (a speed figure: no product check) */
    double sec = 0, fl = 0;
    dck_status s = dck_blas_cuda_bench(1, 64, 128, 32, 1, DCK_BLAS_TF32, &sec, &fl);
    printf("%s cuBLAS TF32 math mode (cublasSetMathMode): %s\n", s == DCK_OK ? "ok  " : "FAIL",
           s == DCK_OK ? "accepted" : dck_last_error());
    failures += s != DCK_OK;
    printf("check_cublas: %d failure(s)\n", failures);
    return failures ? 1 : 0;
}
