/* mql_pace.h -- when a lease renews, and how many renewals may be in flight.
 *
 * The renewal thread asks three questions; the answers are pure functions of
 * a small state, so the rules can be tested without a broker or a thread:
 *
 *   phase          Every lease renews at its own phase of the period: a
 *                   fixed point in [0, every) taken from its id times the
 *                   golden ratio (plus a per-client salt), so consecutive
 *                   ids land evenly over the period however they arrive. Its
 *                   first renewal is the first time at its phase that is at
 *                   least 0.9 x every after the receive, each later one the
 *                   first at its phase at least every/2 after the last was
 *                   sent: on time that is exactly one period, and a late
 *                   renewal returns to its phase instead of pushing it back.
 *                   So a consumer holding N leases asks for N/every renewals a
 *                   second at every moment, not in waves that follow the
 *                   receives (a burst of receives used to make a burst of
 *                   renewals in every later period, and a random early jitter
 *                   made the average period a twentieth short).
 *   latest safe     remaining <= margin, margin = max(invisible/3, K x the
 *                   observed p99 renewal latency): a slow broker makes us
 *                   renew earlier, never later. A user's own later
 *                   renew_every lowers the invisible/3 part to what it leaves
 *                   (one no shorter than the window leaves nothing: it keeps
 *                   invisible/3).
 *   how many now    at most max_inflight ChangeInvisibleDuration calls at
 *                   once (twice that while behind); due leases wait in timer
 *                   order. So a renewal's request timeout measures the
 *                   broker, not a queue of our own making in front of one
 *                   HTTP/2 connection.
 *
 *   behind         the oldest renewal due and not yet sent is older than
 *                   max(50 ms, every/400): the receive side then holds its
 *                   receives until the renewals catch up (mql_receive.c),
 *                   so a fill never takes the time the renewals it made due
 *                   need. every/400 is a quarter of a percent of the period;
 *                   50 ms is the slack's cap, what a renewal may come early.
 *
 * The p99 comes from a small histogram of power-of-two milliseconds whose
 * counts are halved every PACE_DECAY samples, so it follows the broker.
 */
#ifndef MQL_PACE_H
#define MQL_PACE_H

#include <stdint.h>

#define MQL_PACE_BUCKETS 18         /* <= 1 ms, 2 ms, 4 ms, ... 2^16 ms, more */
/* Renewals in flight at once, and twice that while the renewals are behind.
 * By Little's law a consumer renews at most in-flight / latency a second: a
 * million leases at 120 s ask 25,000 a second, and with a broker busy with a
 * fill (8 - 15 ms a renewal) 256 carried no more than that, so the due queue
 * never caught up (p99 lateness 9.9 s in bench/README "Renewals in flight").
 * 1,024 at all times moved the queue into the broker instead: at 30,000 a
 * second (100,000 leases at 10 s) each renewal took 35 ms and a third more
 * client CPU, and ran 0.5 s late. 512 keeps that row and the million's steady
 * state on time, but a million's fill still ran 1 % of its renewals up to
 * 250 ms late; so while the due queue is behind (below) the bound doubles to
 * what carried the fill on time, and it comes back once the queue has caught
 * up. A renewal waiting in the broker rather than in our queue is still safe:
 * the margin follows the observed p99 latency. */
#define MQL_PACE_MAX_INFLIGHT 512
#define MQL_PACE_BEHIND_INFLIGHT 2  /* times MAX_INFLIGHT while behind */
#define MQL_PACE_P99_FACTOR 4       /* margin >= K x p99 latency */
#define MQL_PACE_SLACK_MAX_MS 50    /* renewals up to this much early go out together */
#define MQL_PACE_BEHIND_MIN_MS 50   /* renewals are behind past max(this, every/400) */
#define MQL_PACE_BEHIND_BACKLOG 32  /* ... or when this many went out that late in one pass */

typedef struct mql_pace {
    int64_t invisible_ms;           /* what each renewal extends the deadline to */
    int64_t every_ms;               /* preferred period after a success */
    int max_inflight;
    uint64_t salt;                  /* mixed into every phase: clients do not share phases */
    uint32_t counts[MQL_PACE_BUCKETS];
    uint32_t samples;               /* since the last decay */
    int64_t p99_ms;                 /* 0 until enough samples */
} mql_pace;

void mql_pace_init(mql_pace *p, int64_t invisible_ms, int64_t every_ms);
/* The margin a renewal keeps before the deadline at the latest. */
int64_t mql_pace_margin_ms(const mql_pace *p);
/* Where in [0, every) the renewals of lease `key` fall (see "phase" above). */
int64_t mql_pace_phase_ms(const mql_pace *p, uint64_t key);
/* First renewal of lease `key` acquired at acquired_ms: at its phase, at least
 * 0.9 x every after acquired_ms, never after the latest safe time. */
int64_t mql_pace_first_at(const mql_pace *p, int64_t acquired_ms, int64_t deadline_ms,
                          uint64_t key);
/* Next renewal after one sent at sent_ms succeeded (deadline_ms is the new
 * deadline): at its phase, at least every/2 after sent_ms, never after the
 * latest safe time. */
int64_t mql_pace_next_at(const mql_pace *p, int64_t sent_ms, int64_t deadline_ms,
                         uint64_t key);
/* A renewal due within this many ms goes out with one that is due now: a
 * little early is always safe, and a few leases then cost one wake-up of the
 * thread for several renewals instead of one each (every/64, at most
 * MQL_PACE_SLACK_MAX_MS). The next renewal snaps back to the lease's phase. */
int64_t mql_pace_slack_ms(const mql_pace *p);
/* How late the oldest due renewal may be before the renewals are behind. */
int64_t mql_pace_behind_ms(const mql_pace *p);
/* How many renewals may start now, with inflight already out: up to
 * max_inflight, or MQL_PACE_BEHIND_INFLIGHT times that while behind. */
int mql_pace_may_start(const mql_pace *p, int inflight, int behind);
/* One observed renewal latency (request to reply, or to its timeout; the
 * caller leaves out calls that reached no broker). */
void mql_pace_observe(mql_pace *p, int64_t latency_ms);

#endif /* MQL_PACE_H */
