/* mql_pace.c -- renewal pacing rules (see mql_pace.h). Pure: no clock, no lock. */
#include "mql_pace.h"

#include <string.h>

#define PACE_DECAY 4096        /* halve the histogram after this many samples */
#define PACE_RECOMPUTE 64      /* recompute the p99 this often */
#define PACE_MIN_SAMPLES 64    /* no p99 from fewer samples */

void mql_pace_init(mql_pace *p, int64_t invisible_ms, int64_t every_ms) {
    memset(p, 0, sizeof(*p));
    p->invisible_ms = invisible_ms;
    p->every_ms = every_ms > 0 ? every_ms : invisible_ms / 3;
    p->max_inflight = MQL_PACE_MAX_INFLIGHT;
}

int64_t mql_pace_margin_ms(const mql_pace *p) {
    int64_t third = p->invisible_ms / 3, left = p->invisible_ms - p->every_ms;
    /* a period no shorter than the window leaves nothing to keep: it would
     * put every renewal at the deadline, when none is sent any more */
    int64_t margin = left > 0 && left < third ? left : third;
    int64_t slow = MQL_PACE_P99_FACTOR * p->p99_ms;
    int64_t most = p->invisible_ms - p->invisible_ms / 10;
    if (slow > margin) margin = slow;
    if (margin > most) margin = most;   /* still renew once per tenth of the window */
    return margin > 0 ? margin : 0;
}

/* The period, never 0 (the phase arithmetic divides by it). */
static int64_t period_ms(const mql_pace *p) {
    return p->every_ms > 0 ? p->every_ms : 1;
}

int64_t mql_pace_phase_ms(const mql_pace *p, uint64_t key) {
    /* 2^64 / golden ratio: the fractions k x phi mod 1 of consecutive k stay
     * evenly spread for any run of them (three-distance theorem). The top 32
     * bits times a period under 2^31 ms fit in 64 bits. */
    uint64_t x = key * UINT64_C(0x9E3779B97F4A7C15) + p->salt;
    return (int64_t)(((x >> 32) * (uint64_t)period_ms(p)) >> 32);
}

/* The first time at or after from that falls on lease key's phase, but never
 * after the latest safe time before deadline_ms. */
static int64_t at_phase(const mql_pace *p, int64_t from, int64_t deadline_ms, uint64_t key) {
    int64_t every = period_ms(p), latest = deadline_ms - mql_pace_margin_ms(p);
    int64_t into = (from - mql_pace_phase_ms(p, key)) % every;
    int64_t at;
    if (into < 0) into += every;
    at = into == 0 ? from : from + (every - into);
    return at < latest ? at : latest;
}

int64_t mql_pace_first_at(const mql_pace *p, int64_t acquired_ms, int64_t deadline_ms,
                          uint64_t key) {
    return at_phase(p, acquired_ms + period_ms(p) - period_ms(p) / 10, deadline_ms, key);
}

int64_t mql_pace_next_at(const mql_pace *p, int64_t sent_ms, int64_t deadline_ms,
                         uint64_t key) {
    return at_phase(p, sent_ms + period_ms(p) / 2, deadline_ms, key);
}

int64_t mql_pace_slack_ms(const mql_pace *p) {
    int64_t slack = p->every_ms / 64;
    return slack < MQL_PACE_SLACK_MAX_MS ? slack : MQL_PACE_SLACK_MAX_MS;
}

int64_t mql_pace_behind_ms(const mql_pace *p) {
    int64_t t = p->every_ms / 400;
    return t > MQL_PACE_BEHIND_MIN_MS ? t : MQL_PACE_BEHIND_MIN_MS;
}

int mql_pace_may_start(const mql_pace *p, int inflight, int behind) {
    int most = behind ? p->max_inflight * MQL_PACE_BEHIND_INFLIGHT : p->max_inflight;
    return inflight < most ? most - inflight : 0;
}

static int bucket_of(int64_t ms) {
    int b = 0;
    while (b < MQL_PACE_BUCKETS - 1 && ms > ((int64_t)1 << b)) b++;
    return b;
}

static void recompute_p99(mql_pace *p) {
    uint64_t total = 0, seen = 0;
    int b;
    for (b = 0; b < MQL_PACE_BUCKETS; b++) total += p->counts[b];
    if (total < PACE_MIN_SAMPLES) return;
    for (b = 0; b < MQL_PACE_BUCKETS; b++) {
        seen += p->counts[b];
        if (seen * 100 >= total * 99) break;
    }
    /* the bucket's upper bound: a p99 is never under-estimated */
    p->p99_ms = (int64_t)1 << (b < MQL_PACE_BUCKETS - 1 ? b : MQL_PACE_BUCKETS - 1);
}

void mql_pace_observe(mql_pace *p, int64_t latency_ms) {
    int b;
    p->counts[bucket_of(latency_ms < 0 ? 0 : latency_ms)]++;
    p->samples++;
    if (p->samples % PACE_RECOMPUTE == 0) recompute_p99(p);
    if (p->samples >= PACE_DECAY) {
        for (b = 0; b < MQL_PACE_BUCKETS; b++) p->counts[b] /= 2;
        p->samples = 0;
    }
}
