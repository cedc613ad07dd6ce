/* mql_deferred.h -- the consumer's deferred releases (see mql_deferred.c):
 * a list, newest first, and an index from a lease id to the release that
 * waits for it. Plain links and arrays: the releases are mql_release.c's.
 * Runs with c->mu held, as the release that asks.
 */
#ifndef MQL_DEFERRED_H
#define MQL_DEFERRED_H

#include <stddef.h>
#include <stdint.h>

/* Where a release sits on the list (a field of struct mql_release). */
typedef struct mql_deferred_link {
    struct mql_deferred_link *prev, *next;
} mql_deferred_link;

typedef struct mql_deferred_slot {
    uint64_t lease_id;                  /* 0: free (the lease table's ids start at 1) */
    mql_deferred_link *link;
} mql_deferred_slot;

typedef struct mql_deferred {
    mql_deferred_link *head;            /* newest first */
    mql_deferred_slot *slots;           /* open addressing, linear probing */
    size_t cap, used;                   /* cap: 0 or a power of two */
} mql_deferred;

/* link goes on the list, and each of its n leases whose settled[i] is 0 into
 * the index. */
void mql_deferred_add(mql_deferred *d, mql_deferred_link *link, const uint64_t *lease_ids,
                      const int *settled, size_t n);
/* link leaves the list, and its leases the index. */
void mql_deferred_remove(mql_deferred *d, mql_deferred_link *link, const uint64_t *lease_ids,
                         size_t n);
/* The release on the list that waits for lease_id, or NULL: one probe. */
mql_deferred_link *mql_deferred_find(const mql_deferred *d, uint64_t lease_id);
/* Frees the index (the links are their releases'); the list is left empty. */
void mql_deferred_free(mql_deferred *d);

#endif /* MQL_DEFERRED_H */
