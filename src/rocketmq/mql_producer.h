/* mql_producer.h -- the producer's one job, SendMessage (see mql_producer.c).
 * Runs with c->mu held.
 */
#ifndef MQL_PRODUCER_H
#define MQL_PRODUCER_H

#include "mql_base.h"

/* One message to topic (mql_client_send): the op of its event. */
uint64_t mql_producer_send(mql_client *c, const char *topic, const uint8_t *body, size_t len,
                           const mql_send_opts *opts);

/* RecallMessage of a delay message by the recall handle its send answered:
 * the op of its event (message_id set when it succeeded). */
uint64_t mql_producer_recall(mql_client *c, const char *topic, const char *handle);

#endif /* MQL_PRODUCER_H */
