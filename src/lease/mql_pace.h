/* mql_pace.h -- when a lease renews, and how many renewals may be in flight.
 *
 * The renewal thread asks three questions; the answers are pure functions of
 * a small state, so the rules can be tested without a broker or a thread:
 *
 *   first renewal   A receive hands over up to 32 leases at once and a busy
 *                   consumer receives thousands per second, so first renewals
 *                   that simply fell due `every` after their receive would
 *                   come as one burst, and every later period would repeat it
 *                   (a lease renews `every` after its last success). Instead
 *                   each first renewal takes the next free slot of a cursor
 *                   that hands out at most one slot per `spacing` (5,000/s),
 *                   never before the preferred time and never after the latest
 *                   safe time. Slots taken once keep their phase afterwards.
 *   latest safe     remaining <= margin, margin = max(invisible/3, K x the
 *                   observed p99 renewal latency): a slow broker makes us
 *                   renew earlier, never later. A user's own later
 *                   renew_every lowers the invisible/3 part to what it leaves.
 *   how many now    at most max_inflight ChangeInvisibleDuration calls at
 *                   once; due leases wait in timer order. So a renewal's
 *                   request timeout measures the broker, not a queue of our
 *                   own making in front of one HTTP/2 connection.
 *
 * The p99 comes from a small histogram of power-of-two milliseconds whose
 * counts are halved every PACE_DECAY samples, so it follows the broker.
 */
#ifndef MQL_PACE_H
#define MQL_PACE_H

#include <stdint.h>

#define MQL_PACE_BUCKETS 18         /* <= 1 ms, 2 ms, 4 ms, ... 2^16 ms, more */
#define MQL_PACE_SPACING_US 200     /* first renewals: at most 5,000 slots per second */
#define MQL_PACE_MAX_INFLIGHT 256   /* renewals in flight at once */
#define MQL_PACE_P99_FACTOR 4       /* margin >= K x p99 latency */

typedef struct mql_pace {
    int64_t invisible_ms;           /* what each renewal extends the deadline to */
    int64_t every_ms;               /* preferred period after a success */
    int max_inflight;
    int64_t spacing_us;
    int64_t cursor_us;              /* next free first-renewal slot (monotonic µs) */
    uint32_t counts[MQL_PACE_BUCKETS];
    uint32_t samples;               /* since the last decay */
    int64_t p99_ms;                 /* 0 until enough samples */
} mql_pace;

void mql_pace_init(mql_pace *p, int64_t invisible_ms, int64_t every_ms);
/* The margin a renewal keeps before the deadline at the latest. */
int64_t mql_pace_margin_ms(const mql_pace *p);
/* First renewal of a lease acquired at acquired_ms, preferably every - jitter_ms
 * later (jitter_ms < every/10, as for every renewal); takes a slot. */
int64_t mql_pace_first_at(mql_pace *p, int64_t acquired_ms, int64_t deadline_ms,
                          int64_t jitter_ms);
/* Next renewal after one sent at sent_ms succeeded (deadline_ms is the new
 * deadline); jitter_ms (< every/10) makes it a little early at random. */
int64_t mql_pace_next_at(const mql_pace *p, int64_t sent_ms, int64_t deadline_ms,
                         int64_t jitter_ms);
/* How many renewals may start now, with inflight already out. */
int mql_pace_may_start(const mql_pace *p, int inflight);
/* One observed renewal latency (request to reply). */
void mql_pace_observe(mql_pace *p, int64_t latency_ms);

#endif /* MQL_PACE_H */
