/* mql_transaction.h -- ending a half message: EndTransaction (see
 * mql_transaction.c). Runs with c->mu held.
 */
#ifndef MQL_TRANSACTION_H
#define MQL_TRANSACTION_H

#include "mql_base.h"

/* Commits (commit 1) or rolls back the half message message_id of topic,
 * which the send answered with transaction_id; from_check says the proxy asked
 * (RecoverOrphanedTransactionCommand: source SERVER_CHECK), else the producer
 * ends its own (SOURCE_CLIENT). trace_context may be NULL. The op of its event. */
uint64_t mql_transaction_end(mql_client *c, const char *topic, const char *message_id,
                             const char *transaction_id, int commit, int from_check,
                             const char *trace_context);

#endif /* MQL_TRANSACTION_H */
