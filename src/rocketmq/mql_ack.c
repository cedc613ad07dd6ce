/* mql_ack.c -- which entry of an AckMessage reply answers which lease.
 *
 * The proxy answers an ack of several leases with one entry each
 * (AckMessageActivity copies the request's message id and receipt handle
 * into every entry, in any order). An entry that names another lease of the
 * ack must never answer this one: its "ok" would be taken for this lease's
 * ack, and this message would run again while the other was reported failed.
 */
#include "mql_ack.h"

#include <stdlib.h>
#include <string.h>

/* An entry that names neither a receipt handle nor a message id: only its
 * position can say which lease it answers. */
static int names_nothing(const mql_ack_entry *e) {
    return !(e->receipt_handle && *e->receipt_handle) && !(e->message_id && *e->message_id);
}

/* Whether e names a receipt handle: then that handle alone says whose entry
 * it is. */
static int names_handle(const mql_ack_entry *e) {
    return e->receipt_handle && *e->receipt_handle;
}

static int entry_ok(const mql_ack_entry *e) {
    return e->status && e->status->code == APACHE__ROCKETMQ__V2__CODE__OK;
}

/* An entry left over that names the handle of a lease matched OK, and fails:
 * two answers for one handle, which no honest proxy sends (one entry per
 * request entry). The failure stands for that lease: read as failed, its
 * lease expires and the message runs again, as any failed ack's; read as
 * acked wrongly, a message whose ack did not land is never run again. */
static void fail_on_contradiction(const mql_lease_table *leases, const uint64_t *ids, size_t n,
                                  const Apache__Rocketmq__V2__AckMessageResponse *resp,
                                  unsigned char *used, const mql_ack_entry **match) {
    size_t i, j;
    for (j = 0; j < resp->n_entries; j++) {
        const mql_ack_entry *e = resp->entries[j];
        if (used[j] || !names_handle(e) || entry_ok(e)) continue;
        for (i = 0; i < n; i++) {
            const mql_lease *l;
            if (!match[i] || !entry_ok(match[i]) || !(l = mql_lease_find(leases, ids[i]))) continue;
            if (strcmp(e->receipt_handle, l->handle) == 0) {
                used[j] = 1;
                match[i] = e;
                break;
            }
        }
    }
}

/* The unused entry that names the lease's receipt handle (two leases of one
 * message id differ by handle), else the unused one with its message id and
 * no handle, else the unused one at its position if that names nothing.
 * Each entry answers once. Each way is tried for every lease before the next
 * way for any: lease by lease, one whose own entry was missing took the
 * entry of a later lease of the ack by its id or position. An entry with
 * another handle answers another delivery, never this one by its id: a
 * duplicate of a sibling lease's entry, or one for a handle never sent,
 * reported this lease acked when nothing answered its handle. */
void mql_ack_match(const mql_lease_table *leases, const uint64_t *ids, const int *settled, size_t n,
                   const Apache__Rocketmq__V2__AckMessageResponse *resp, const mql_ack_entry **match) {
    unsigned char *used = mql_xcalloc(resp->n_entries, 1);
    size_t i, j, position = 0;
    int by_id;
    for (by_id = 0; by_id < 2; by_id++) {
        for (i = 0; i < n; i++) {
            const mql_lease *l;
            if (settled[i] || match[i] || !(l = mql_lease_find(leases, ids[i]))) continue;
            for (j = 0; j < resp->n_entries && !match[i]; j++) {
                const char *have = by_id ? resp->entries[j]->message_id : resp->entries[j]->receipt_handle;
                if (used[j] || !have || !*have || (by_id && names_handle(resp->entries[j]))) continue;
                if (strcmp(have, by_id ? l->message_id : l->handle) == 0) {
                    used[j] = 1;
                    match[i] = resp->entries[j];
                }
            }
        }
    }
    for (i = 0; i < n; i++) {
        if (settled[i]) continue;   /* never sent: it has no position */
        if (!match[i] && position < resp->n_entries && !used[position] &&
            names_nothing(resp->entries[position]) && mql_lease_find(leases, ids[i])) {
            used[position] = 1;
            match[i] = resp->entries[position];
        }
        position++;
    }
    fail_on_contradiction(leases, ids, n, resp, used, match);
    free(used);
}
