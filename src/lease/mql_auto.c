/* mql_auto.c -- the adaptive lease length (see mql_auto.h). */
#include "mql_auto.h"

#include <string.h>

/* 2^(k/8) for k = 0..7, times 2^20: the steps inside one doubling. */
static const int64_t STEP[MQL_AUTO_PER_DOUBLING] = {
    1048576, 1143480, 1246974, 1359835, 1482910, 1617125, 1763488, 1923097};

static int64_t bound_of(int b) {
    int d = b / MQL_AUTO_PER_DOUBLING, k = b % MQL_AUTO_PER_DOUBLING;
    /* rounded up: a bound is never below the durations it holds */
    return ((STEP[k] << d) + (1 << 20) - 1) >> 20;
}

static int bucket_of(int64_t ms) {
    int b = 0;
    while (b < MQL_AUTO_BUCKETS - 1 && ms > bound_of(b)) b++;
    return b;
}

int64_t mql_auto_bucket_bound(int64_t ms) {
    return bound_of(bucket_of(ms));
}

static int64_t clamp(const mql_auto *a, int64_t v) {
    if (v < a->min_ms) return a->min_ms;
    if (v > a->max_ms) return a->max_ms;
    return v;
}

void mql_auto_init(mql_auto *a, int64_t start_ms, int64_t min_ms, int64_t max_ms, int margin_pct) {
    memset(a, 0, sizeof(*a));
    a->min_ms = min_ms;
    a->max_ms = max_ms > min_ms ? max_ms : min_ms;
    a->margin_pct = margin_pct > 0 ? margin_pct : 100;
    a->value_ms = clamp(a, start_ms);
}

static void recompute(mql_auto *a) {
    uint64_t seen = 0;
    int b;
    if (a->total < MQL_AUTO_MIN_SAMPLES) return;
    for (b = 0; b < MQL_AUTO_BUCKETS - 1; b++) {
        seen += a->counts[b];
        if (seen * 100 >= (uint64_t)a->total * 99) break;
    }
    a->p99_ms = bound_of(b);
    a->value_ms = clamp(a, a->p99_ms * a->margin_pct / 100);
}

int mql_auto_observe(mql_auto *a, int64_t held_ms) {
    int64_t before = a->value_ms;
    int b;
    a->counts[bucket_of(held_ms < 0 ? 0 : held_ms)]++;
    a->total++;
    if (++a->since >= MQL_AUTO_RECOMPUTE || a->total == MQL_AUTO_MIN_SAMPLES) {
        a->since = 0;
        recompute(a);
    }
    if (a->total >= MQL_AUTO_DECAY) {
        a->total = 0;
        for (b = 0; b < MQL_AUTO_BUCKETS; b++) {
            a->counts[b] /= 2;
            a->total += a->counts[b];
        }
    }
    return a->value_ms != before;
}
