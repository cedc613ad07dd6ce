/* mql_auto.h -- the adaptive lease length (invisible = "auto").
 *
 * A fixed invisible duration is a bet on the handler times: too short and
 * every long handler costs renewals, too long and a crashed worker's messages
 * wait that long before anyone else gets them. With "auto" the core watches
 * how long leases are held (receive to ack or nack, as the handler histogram
 * of the metrics counts it) and asks each new receive and renewal for
 *
 *     clamp(p99 x margin, min, max)
 *
 * the p99 being the upper bound of the bucket it falls in, so it is never
 * under-estimated by the bucketing. Google Pub/Sub's clients size their ack
 * deadline the same way (Go messageIterator.ackDeadline: the p99 of ack
 * times, within bounds). Renewal stays on: a handler past the window keeps
 * its lease, it only costs a renewal.
 *
 * Until MQL_AUTO_MIN_SAMPLES leases have been released the value is the start
 * value (a p99 of fewer samples is just the largest one). Buckets are
 * geometric, eight per doubling (9 % apart), from 1 ms to past 12 h; their
 * counts are halved every MQL_AUTO_DECAY samples, so the value follows a
 * workload that changes. Pure: no clock, no lock (the client's lock guards it).
 */
#ifndef MQL_AUTO_H
#define MQL_AUTO_H

#include <stdint.h>

#define MQL_AUTO_PER_DOUBLING 8
#define MQL_AUTO_BUCKETS (27 * MQL_AUTO_PER_DOUBLING)   /* 2^27 ms > 37 h */
#define MQL_AUTO_MIN_SAMPLES 100
#define MQL_AUTO_DECAY 2048
#define MQL_AUTO_RECOMPUTE 16

typedef struct mql_auto {
    int64_t min_ms, max_ms;
    int margin_pct;                  /* 200: twice the p99 */
    uint32_t counts[MQL_AUTO_BUCKETS];
    uint32_t total;                  /* samples in counts (after decays) */
    uint32_t since;                  /* samples since the last recompute */
    int64_t p99_ms;                  /* 0 until MQL_AUTO_MIN_SAMPLES */
    int64_t value_ms;                /* what the next receive or renewal asks for */
} mql_auto;

/* start_ms is the value until enough samples; it is clamped to [min, max]. */
void mql_auto_init(mql_auto *a, int64_t start_ms, int64_t min_ms, int64_t max_ms, int margin_pct);
/* One lease held held_ms. Returns 1 when value_ms changed. */
int mql_auto_observe(mql_auto *a, int64_t held_ms);
/* The upper bound (ms) of the bucket a duration falls in (for tests). */
int64_t mql_auto_bucket_bound(int64_t ms);

#endif /* MQL_AUTO_H */
