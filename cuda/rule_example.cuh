// rule_example.cuh -- a rule header written by hand in the form cep_gpu/codegen/cuda.py emits,
// so that cdp.cu compiles on its own (the nvcc test). The rule is the seq3 benchmark:
//
//   define Seq3 from C(k=$k) and each B(k=$k) within W from C and each A(k=$k) within W from B
//
// Declaration order C=0, B=1, A=2; pointer slots 2/3: values/validity of attribute `k` (int64).
#ifndef CEP_RULE_DEFINED
#define CEP_RULE_DEFINED 1
#define CEP_NPRED 3
#define CEP_NAGG 0

#include "cdp.cuh"

// k of the event in row `row`; *ok is false where the event lacks it.
CEP_DEVICE cep_i64 ex_k(const Ctx& c, cep_i64 row, bool* ok) {
    *ok = cep_ptr<cep_u8>(c, 3)[row] != 0;
    return cep_ptr<cep_i64>(c, 2)[row];
}

// B (step 1) and A (step 2) must have the terminator's k.
CEP_DEVICE bool ex_same_k(const Ctx& c, const cep_i64* s, int pred) {
    bool ok0, ok1;
    cep_i64 a = ex_k(c, s[pred], &ok0);
    cep_i64 b = ex_k(c, s[0], &ok1);
    return ok0 && ok1 && a == b;
}

CEP_DEVICE bool cep_rule_check(int step_id, const Ctx& c, const cep_i64* s) {
    switch (step_id) {
        case 0: return true;
        case 1: return ex_same_k(c, s, 1);
        case 2: return ex_same_k(c, s, 2);
        default: return false;
    }
}

CEP_DEVICE void cep_rule_aggregates(const Ctx& c, const cep_i64* s, double* out) {
    (void)c; (void)s; (void)out;
}

// No Kleene position: the Kleene hooks are never called.
CEP_DEVICE bool cep_kleene_elem(int k, const Ctx& c, const cep_i64* s, cep_i64 self) {
    (void)k; (void)c; (void)s; (void)self;
    return true;
}
CEP_DEVICE bool cep_kleene_pair(int k, const Ctx& c, const cep_i64* s, cep_i64 self, cep_i64 nxt) {
    (void)k; (void)c; (void)s; (void)self; (void)nxt;
    return true;
}
CEP_DEVICE void cep_kleene_add(int k, const Ctx& c, cep_i64 self, CepAcc* acc) {
    (void)k; (void)c; (void)self; (void)acc;
}
CEP_DEVICE void cep_kleene_values(int k, const CepAcc* acc, double* ka) {
    (void)k; (void)acc; (void)ka;
}
CEP_DEVICE bool cep_kleene_check(int step_id, const Ctx& c, const cep_i64* s, const double* ka) {
    (void)step_id; (void)c; (void)s; (void)ka;
    return true;
}
#endif
