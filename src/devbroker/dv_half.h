/* dv_half.h -- the dev broker's half messages: transactions not yet ended.
 *
 * A TRANSACTION message sent to the dev broker is kept here, invisible, until
 * EndTransaction commits it (it is appended to its topic then) or rolls it
 * back (dropped), as RocketMQ's broker keeps it in RMQ_SYS_TRANS_HALF_TOPIC.
 * One still here check_ms after it was sent is asked about: the server sends
 * RecoverOrphanedTransactionCommand to a producer that announced its topic,
 * every check_interval_ms, check_max times, then drops it (the broker's
 * transactionTimeOut, transactionCheckInterval, transactionCheckMax).
 *
 * Not thread-safe: the server thread owns it.
 */
#ifndef DV_HALF_H
#define DV_HALF_H

#include <stddef.h>
#include <stdint.h>

#include "apache/rocketmq/v2/service.pb-c.h"

typedef struct dv_half {
    char *topic, *id, *tx;     /* the transaction id the send answered */
    uint8_t *wire;             /* the Message as the producer sent it, packed */
    size_t wire_len;
    int64_t check_at;          /* wall ms of the next check */
    int checks;                /* checks sent so far */
} dv_half;

typedef struct dv_halves {
    dv_half *v;
    size_t n, cap;
    uint64_t next_tx;
    uint64_t begun, committed, rolled_back, checks, dropped, ends_lost;
} dv_halves;

void dv_half_init(dv_halves *h);
void dv_half_free(dv_halves *h);
/* Keeps m (topic, message id id) as a half message, first checked at
 * check_at; returns its transaction id (owned by h). */
const char *dv_half_add(dv_halves *h, const char *topic, const char *id,
                        const Apache__Rocketmq__V2__Message *m, int64_t check_at);
/* The half message of transaction tx, or NULL (ended, dropped, never begun). */
dv_half *dv_half_find(dv_halves *h, const char *tx);
/* Forgets x (a pointer dv_half_find returned, or &h->v[i]). */
void dv_half_remove(dv_halves *h, dv_half *x);

#endif /* DV_HALF_H */
