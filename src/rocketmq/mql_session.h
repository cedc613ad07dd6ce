/* mql_session.h -- what a client does before and around any message (see
 * mql_session.c): route, Telemetry settings, heartbeat, reconnecting (moving
 * between endpoints: mql_endpoint.h), terminate. Runs with c->mu held unless
 * it says otherwise.
 */
#ifndef MQL_SESSION_H
#define MQL_SESSION_H

#include "mql_base.h"

/* Starts the session: QueryRoute (a consumer) or Telemetry (a producer). */
void mql_session_begin(mql_client *c);
/* Where a session that lost its proxy tries next, after an attempt (or the
 * lost stream) failed with code: at is the endpoint in use of n, call_ms the
 * deadline of the attempt's first calls (0: request_ms), both updated.
 * Nothing answered (UNAVAILABLE: refused, reset): the next endpoint, wrapping
 * around. No answer in time (TIMEOUT): the same one, with twice the deadline
 * up to MQL_BACKOFF_CAP_MS, and the next one only once even that ran out
 * (a proxy that is only slow, a cold JVM on a loaded box, is not given up
 * for a dead one). An answer with an error: the same one, as it would be
 * answered the same anywhere. */
void mql_session_retry_plan(size_t n, const char *code, int64_t request_ms, size_t *at,
                            int64_t *call_ms);
/* Runs the session's due timers (heartbeat, Telemetry re-open); returns the
 * earlier of wake and its next timer. */
int64_t mql_session_timers(mql_client *c, int64_t now, int64_t wake);
/* A call came back with the proxy's own answer (a gRPC OK status) while the
 * session waits out a reconnect's backoff: the next attempt goes now. */
void mql_session_proxy_answered(mql_client *c);

/* The host's QueryRoute for a topic (mql_client_route): the op of its event. */
uint64_t mql_session_route(mql_client *c, const char *topic);
/* NotifyClientTermination (mql_client_terminate): the op of its event. */
uint64_t mql_session_terminate(mql_client *c);

#endif /* MQL_SESSION_H */
