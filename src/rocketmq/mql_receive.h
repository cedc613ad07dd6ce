/* mql_receive.h -- where a message enters (see mql_receive.c). Runs with
 * c->mu held.
 */
#ifndef MQL_RECEIVE_H
#define MQL_RECEIVE_H

#include "mql_base.h"

/* A ReceiveMessage for the host (mql_client_receive, which says what batch
 * and max_bytes bound): the op of its event. */
uint64_t mql_receive_start(mql_client *c, int batch, int64_t await_ms, size_t max_bytes);
/* Cancels every receive in flight (they finish with CANCELLED). */
void mql_receive_cancel_all(mql_client *c);

#endif /* MQL_RECEIVE_H */
