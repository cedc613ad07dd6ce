/* mql_ack.h -- which entry of an AckMessage reply answers which lease of the
 * ack (see mql_ack.c). Runs with c->mu held, as the release that asks.
 */
#ifndef MQL_ACK_H
#define MQL_ACK_H

#include "mql_base.h"

typedef Apache__Rocketmq__V2__AckMessageResultEntry mql_ack_entry;

/* For each of the n leases an ack sent (ids[i], settled[i] set for one that
 * was never sent), the entry of resp that answers it in match[i] (NULL:
 * none), looked up in leases; match holds n NULLs on entry. */
void mql_ack_match(const mql_lease_table *leases, const uint64_t *ids, const int *settled, size_t n,
                   const Apache__Rocketmq__V2__AckMessageResponse *resp, const mql_ack_entry **match);

#endif /* MQL_ACK_H */
