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

CEP_KERNEL(cdp_each,
           (const cep_u64* tab, const cep_i64* scal, cep_i64 step_id, cep_i64 pred,
            const cep_i64* seq_in, cep_i64 n_in, const cep_i64* col_rows, const cep_i64* lo,
            const cep_i64* offsets, cep_i64 total, cep_i64* seq_out, cep_i64* keys, cep_u64* count,
            cep_i64 cap),
           (cdp_each_body<CEP_NPRED>(tab, scal, step_id, pred, seq_in, n_in, col_rows, lo,
                                     offsets, total, seq_out, keys, count, cap)))

CEP_KERNEL(cdp_select,
           (const cep_u64* tab, const cep_i64* scal, cep_i64 step_id, cep_i64 pred,
            cep_i64 take_last, const cep_i64* seq_in, cep_i64 n_in, const cep_i64* col_rows,
            const cep_i64* lo, const cep_i64* offsets, cep_i64 total, cep_i64* best),
           (cdp_select_body<CEP_NPRED>(tab, scal, step_id, pred, take_last, seq_in, n_in,
                                       col_rows, lo, offsets, total, best)))

CEP_KERNEL(cdp_aggregates,
           (const cep_u64* tab, const cep_i64* scal, const cep_i64* seq, cep_i64 n, double* out),
           (cdp_aggregates_body<CEP_NPRED, CEP_NAGG>(tab, scal, seq, n, out)))

CEP_KERNEL(cdp_kleene_elements,
           (const cep_u64* tab, const cep_i64* scal, cep_i64 kpos, const cep_i64* seq_in,
            cep_i64 n_in, const cep_i64* col_rows, const cep_i64* lo, const cep_i64* offsets,
            cep_i64 total, cep_u8* mask),
           (cdp_kleene_elements_body<CEP_NPRED>(tab, scal, kpos, seq_in, n_in, col_rows, lo,
                                                offsets, total, mask)))

CEP_KERNEL(cdp_kleene_sets,
           (const cep_u64* tab, const cep_i64* scal, cep_i64 step_id, cep_i64 kpos,
            cep_i64 last_col, cep_i64 greedy, cep_i64 min_s, cep_i64 max_s, const cep_i64* seq_in,
            cep_i64 n_in, const cep_i64* e_off, const cep_i64* e_rows, const cep_i64* ftab,
            cep_i64 fw, const cep_i64* offsets, cep_i64 total, const double* aggs_in,
            cep_i64* set_seq, cep_i64* set_start, cep_i64* set_len, cep_i64* keys, cep_i64* flat,
            double* set_aggs, cep_u64* count, cep_i64 cap, cep_i64 ecap),
           (cdp_kleene_sets_body<CEP_NPRED, CEP_NAGG>(
               tab, scal, step_id, kpos, last_col, greedy, min_s, max_s, seq_in, n_in, e_off,
               e_rows, ftab, fw, offsets, total, aggs_in, set_seq, set_start, set_len, keys, flat,
               set_aggs, count, cap, ecap)))
