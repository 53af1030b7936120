// cdp.cu -- the __global__ wrappers of the CDP kernels (bodies in cdp.cuh).
//
// Compiled together with one rule header that defines CEP_RULE_DEFINED, CEP_NPRED, CEP_NAGG and
// the rule hooks (cep_gpu/codegen/cuda.py writes it; kernels/gpu.py and kernels/host.py put the
// generated text before `#include "cdp.cu"`). Compiled alone (the nvcc test), it uses
// rule_example.cuh, the seq3 benchmark rule written by hand.
//
// Every scalar parameter is a 64-bit integer and every array a pointer, so the CuPy launch and
// the ctypes call of the host build pass the same argument list.
#include "cdp.cuh"

#ifndef CEP_RULE_DEFINED
#include "rule_example.cuh"
#endif

CEP_KERNEL(cdp_filter,
           (const cep_u64* tab, const cep_i64* scal, cep_i64 step_id, const cep_i64* seq_in,
            cep_i64 n_in, cep_i64* seq_out, cep_u64* count, cep_i64 cap),
           (cdp_filter_body<CEP_NPRED>(tab, scal, step_id, seq_in, n_in, seq_out, count, cap)))

CEP_KERNEL(cdp_ranges,
           (const cep_u64* tab, const cep_i64* scal, const cep_i64* seq_in, cep_i64 n_in,
            cep_i64 np, cep_i64 anchor, cep_i64 before, cep_i64 window, const cep_i64* col_ts,
            cep_i64 col_n, cep_i64* lo_out, cep_i64* size_out),
           (cdp_ranges_body(tab, scal, seq_in, n_in, np, anchor, before, window, col_ts, col_n,
                            lo_out, size_out)))

CEP_KERNEL(cdp_each,
           (const cep_u64* tab, const cep_i64* scal, cep_i64 step_id, cep_i64 pred,
            const cep_i64* seq_in, cep_i64 n_in, const cep_i64* col_rows, const cep_i64* lo,
            const cep_i64* offsets, cep_i64 total, cep_i64* seq_out, cep_u64* count, cep_i64 cap),
           (cdp_each_body<CEP_NPRED>(tab, scal, step_id, pred, seq_in, n_in, col_rows, lo,
                                     offsets, total, seq_out, count, cap)))

CEP_KERNEL(cdp_select,
           (const cep_u64* tab, const cep_i64* scal, cep_i64 step_id, cep_i64 pred,
            cep_i64 take_last, const cep_i64* seq_in, cep_i64 n_in, const cep_i64* col_rows,
            const cep_i64* lo, const cep_i64* offsets, cep_i64 total, cep_i64* best),
           (cdp_select_body<CEP_NPRED>(tab, scal, step_id, pred, take_last, seq_in, n_in,
                                       col_rows, lo, offsets, total, best)))

CEP_KERNEL(cdp_emit,
           (cep_i64 pred, const cep_i64* seq_in, cep_i64 n_in, const cep_i64* col_rows,
            const cep_i64* best, cep_i64* seq_out, cep_u64* count, cep_i64 cap),
           (cdp_emit_body<CEP_NPRED>(pred, seq_in, n_in, col_rows, best, seq_out, count, cap)))

CEP_KERNEL(cdp_aggregates,
           (const cep_u64* tab, const cep_i64* scal, const cep_i64* seq, cep_i64 n, double* out),
           (cdp_aggregates_body<CEP_NPRED, CEP_NAGG>(tab, scal, seq, n, out)))
