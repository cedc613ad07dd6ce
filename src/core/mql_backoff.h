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

/* The retry policy the proxy sends a consumer in its Settings
 * (GrpcClientSettingsManager.mergeSubscriptionData): max_attempts is the
 * group's retryMaxTimes + 1, the backoff the group's GroupRetryPolicy --
 * CUSTOMIZED (a list of steps; RocketMQ's default is 1s 5s 10s 30s 1m 2m ...
 * 2h) or EXPONENTIAL (initial x multiplier^n, capped at max). The official
 * clients read the delay before attempt n+1 as steps[min(n, nsteps) - 1] or
 * min(initial x multiplier^(n-1), max) (CustomizedBackoffRetryPolicy,
 * ExponentialBackoffRetryPolicy). Steps past MQL_RETRY_STEPS_MAX are dropped:
 * the last kept one repeats, as the last step does anyway. */
#define MQL_RETRY_STEPS_MAX 32

typedef struct mql_retry_policy {
    int max_attempts;              /* 0: the server sent no policy */
    int customized;                /* 1: steps_ms; 0: exponential */
    int64_t initial_ms, max_ms;    /* exponential */
    double multiplier;
    int nsteps;                    /* customized */
    int64_t steps_ms[MQL_RETRY_STEPS_MAX];
} mql_retry_policy;

#endif /* MQL_BACKOFF_H */
