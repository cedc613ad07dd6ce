/* mql_metrics.h -- counters and histograms of one client.
 *
 * Plain numbers updated under the client's lock and copied out on request;
 * the Lua layer turns them into a table or the Prometheus text format. Names
 * follow the Prometheus conventions (README lists them). Histograms use one fixed set of buckets (seconds) that
 * spans both a 2 ms renewal and an hour-long handler.
 */
#ifndef MQL_METRICS_H
#define MQL_METRICS_H

#include <stdint.h>

#include "mql_backoff.h"

#define MQL_HIST_BUCKETS 17
extern const double mql_hist_bounds[MQL_HIST_BUCKETS];

typedef struct mql_hist {
    uint64_t counts[MQL_HIST_BUCKETS + 1];   /* last slot: +Inf */
    uint64_t count;
    double sum;
} mql_hist;

void mql_hist_observe(mql_hist *h, double seconds);

#define MQL_MAX_ERROR_KINDS 32

typedef struct mql_error_count {
    char op[16];
    char code[48];
    uint64_t n;
} mql_error_count;

/* Messages counted by a short reason word (corrupted, malformed, dead-lettered). */
#define MQL_MAX_REASONS 12

typedef struct mql_reason_table {
    struct { char reason[32]; uint64_t n; } r[MQL_MAX_REASONS];
    int n;
} mql_reason_table;

/* Counts one under reason. The table names at most MQL_MAX_REASONS - 1
 * reasons; later ones are counted under "other", and a name once given is
 * never taken back. */
void mql_metrics_reason(mql_reason_table *t, const char *reason);

typedef struct mql_metrics {
    uint64_t received;
    uint64_t acks_ok, acks_fail;
    uint64_t nacks_ok, nacks_fail;
    uint64_t renew_success, renew_fail, renew_uncertain;
    uint64_t expire_while_alive;
    uint64_t lost_expired, lost_rejected;
    uint64_t budget_expire, budget_nack;
    uint64_t sent_ok, sent_fail;
    uint64_t orphan_checks;     /* RecoverOrphanedTransactionCommand handed to the host */
    mql_reason_table corrupted;     /* digest or body failed: never reached the host */
    mql_reason_table malformed;     /* frames that were not a usable message */
    mql_reason_table dead_lettered; /* forwarded to the group's DLQ, by reason */
    mql_reason_table given_back;    /* past a receive's batch or byte budget: nacked at once */
    uint64_t dead_letter_fail;
    uint64_t reconnects;        /* next endpoint at start, Telemetry re-opened */
    uint64_t releases_held;     /* releases held until a reconnected proxy had our settings */
    uint64_t receives_held;     /* receives held while the renewals were behind */
    uint64_t receives_held_empty;   /* ... of them answered empty (no time left for a poll) */
    int64_t renew_queue_age_ms; /* the oldest due renewal's age at the last timer pass */
    int64_t renew_queue_age_max_ms; /* the most it has been */
    uint64_t events_dropped;    /* events the host could not take (mql_client_event_dropped) */
    int session_state;          /* mql_client_state, set when copied out */
    int64_t invisible_ms;       /* what the next receive asks for, set when copied out */
    int fifo;                   /* the server's Settings say the group consumes in order */
    mql_retry_policy retry;     /* the server's retry policy for the group (Settings) */
    mql_hist renew_latency;     /* request to reply of ChangeInvisibleDuration */
    mql_hist renew_lateness;    /* scheduled time to send time of a renewal */
    mql_hist handler;           /* receive to ack or nack */
    mql_error_count errors[MQL_MAX_ERROR_KINDS];
    int nerrors;
} mql_metrics;

/* Counts a failed operation by (op, code); codes past the table's size go to "OTHER". */
void mql_metrics_error(mql_metrics *m, const char *op, const char *code);

#endif /* MQL_METRICS_H */
