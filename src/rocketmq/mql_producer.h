/* mql_producer.h -- the producer's one job, SendMessage (see mql_producer.c).
 * Runs with c->mu held.
 */
#ifndef MQL_PRODUCER_H
#define MQL_PRODUCER_H

#include "mql_base.h"

/* One message to topic (mql_client_send): the op of its event. */
uint64_t mql_producer_send(mql_client *c, const char *topic, const uint8_t *body, size_t len,
                           const mql_send_opts *opts);

#endif /* MQL_PRODUCER_H */
