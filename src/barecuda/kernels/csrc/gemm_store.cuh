// gemm_store.cuh -- the epilogue store shared by gemm.cu (mma.sync) and gemm_sm90.cu (wgmma).
//
// One thread's two neighbouring results of a 16-bit C row: C[col], C[col + 1] =
// alpha-scaled v0, v1 (+ beta times their old values when beta != 0). `pair` says the row
// allows one aligned 32-bit store (even ldc, 4-byte aligned C); columns past N are left alone.
#pragma once

#include "mma.cuh"

template <int IS_BF16>
BC_DEV void bc_store_c2(bc_u16* crow, int col, int N, float v0, float v1, float beta, bool pair) {
    if (pair && col + 1 < N) {
        if (beta != 0.f) {
            float c0, c1;
            bc_unpack2<IS_BF16>(*(const bc_u32*)(crow + col), c0, c1);
            v0 += beta * c0;
            v1 += beta * c1;
        }
        *(bc_u32*)(crow + col) = bc_pack2<IS_BF16>(v0, v1);
    } else {
        if (col < N) {
            if (beta != 0.f) v0 += beta * bc_to_f<IS_BF16>(crow[col]);
            crow[col] = bc_from_f<IS_BF16>(v0);
        }
        if (col + 1 < N) {
            if (beta != 0.f) v1 += beta * bc_to_f<IS_BF16>(crow[col + 1]);
            crow[col + 1] = bc_from_f<IS_BF16>(v1);
        }
    }
}
