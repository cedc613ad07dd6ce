/* mql_receive.h -- where a message enters (see mql_receive.c). Runs with
 * c->mu held.
 */
#ifndef MQL_RECEIVE_H
#define MQL_RECEIVE_H

#include "mql_base.h"

/* A ReceiveMessage for the host (mql_client_receive, which says what batch
 * and max_bytes bound): the op of its event. */
uint64_t mql_receive_start(mql_client *c, int batch, int64_t await_ms, size_t max_bytes);
/* The receives held while the renewals were behind: each goes out once they
 * have caught up, or is answered empty when no whole poll fits any more;
 * returns the earlier of wake and the next such moment. */
int64_t mql_receive_timers(mql_client *c, int64_t now, int64_t wake);
/* Ends every held receive with code (the client closes). */
void mql_receive_end_waiting(mql_client *c, const char *code, const char *msg);
/* The broker the next ReceiveMessage names: the route's readable brokers in
 * turn (mql_base.h), NULL before any route. */
const char *mql_receive_next_broker(mql_consumer_part *cs);
/* Cancels every receive in flight and every one held (they finish with CANCELLED). */
void mql_receive_cancel_all(mql_client *c);

#endif /* MQL_RECEIVE_H */
