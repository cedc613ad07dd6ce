/* mql_backoff.h -- how long to wait before connecting again.
 *
 * Exponential with jitter and a cap: the n-th wait in a row (from 0) is drawn
 * from [ceil/2, ceil], ceil = min(cap, base x 2^n) ("equal jitter" in AWS's
 * "Exponential Backoff And Jitter"). The random half keeps a fleet of
 * consumers that lost one proxy from all coming back in the same instant; the
 * fixed half keeps a lone one from spinning on a dead address. A success
 * resets the count. Pure: the caller passes the random number (the client
 * passes its own xorshift's), so tests are deterministic.
 */
#ifndef MQL_BACKOFF_H
#define MQL_BACKOFF_H

#include <stdint.h>

#define MQL_BACKOFF_BASE_MS 200
#define MQL_BACKOFF_CAP_MS 10000

typedef struct mql_backoff {
    int64_t base_ms, cap_ms;
    unsigned attempt;           /* waits since the last success */
} mql_backoff;

void mql_backoff_init(mql_backoff *b, int64_t base_ms, int64_t cap_ms);
/* The next wait, drawn with the random number rnd; counts one attempt. */
int64_t mql_backoff_next(mql_backoff *b, uint64_t rnd);
/* A connection worked: the next wait is short again. */
void mql_backoff_reset(mql_backoff *b);

#endif /* MQL_BACKOFF_H */
