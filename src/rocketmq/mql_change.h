/* mql_change.h -- ChangeInvisibleDuration, below both a renewal and a nack
 * (see mql_change.c). Runs with c->mu held.
 */
#ifndef MQL_CHANGE_H
#define MQL_CHANGE_H

#include "mql_base.h"

/* What a renewal retried after UNAVAILABLE needs before the deadline on top of
 * K x p99: the session is moving to a live proxy, so the retry goes out on a
 * new channel and pays for its connection (TCP, HTTP/2, TLS) first. */
#define MQL_RECONNECT_NEEDS_MS 1000

/* ChangeInvisibleDuration with the lease's newest handle, ending in ops (a
 * renewal's, a nack's); op and ctx are the call's. -1 if it did not start. */
int mql_change_start(mql_client *c, mql_lease *l, int64_t duration_ms,
                     const mql_call_ops *ops, uint64_t op, void *ctx);
/* What a call on the session's new channel needs before a lease's deadline:
 * K x the observed p99 plus MQL_RECONNECT_NEEDS_MS, at most the request
 * timeout. A retried renewal after UNAVAILABLE and a release held for the
 * reconnect (mql_release.c) go out no later than that. */
int64_t mql_change_new_channel_needs_ms(const mql_client *c);
/* Whether a change that failed with code got no reply (TIMEOUT, CANCELLED):
 * it may have been applied, minting a handle we never saw. */
int mql_change_unanswered(const char *code);

#endif /* MQL_CHANGE_H */
