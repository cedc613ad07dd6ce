/* mql_deferred.c -- the consumer's deferred releases: a list and an index.
 *
 * A release waits on this list while one of its leases is being renewed, or
 * while the session reconnects (mql_release.c says why). A long reconnect
 * piles them up: every release the host asks for meanwhile, thousands a
 * second under load. What may let one go out -- its lease's timer, its
 * lease's renewal reply, its lease lost -- names one lease, so the index
 * finds that lease's release in one probe; walking the list for each such
 * event cost O(N) under the client's lock, O(N^2) for N releases going out
 * one timer at a time (100,000 held: 27 ms a timer, the renewals stalled
 * behind it). The list stays for what concerns them all (the settings back,
 * the client closing) and keeps their order, newest first.
 *
 * The index maps a lease id to its release's link. A lease has at most one
 * release under way (the others are settled BUSY at once and never
 * indexed), and lease ids are never reused, so an entry stays valid until
 * its release leaves the list, even after its lease has left the table.
 * Linear probing with Fibonacci hashing (ids count up, so consecutive ones
 * land apart); a removal shifts the run behind it back (Knuth, TAOCP vol. 3,
 * 6.4, Algorithm R), so no tombstones pile up over a long reconnect. The
 * table grows at half full and halves at an eighth, so what a reconnect's
 * 100,000 releases took goes back once they have left.
 */
#include "mql_deferred.h"
#include "mql.h"

#include <stdlib.h>

#define DEFERRED_MIN_CAP 16

static size_t home_of(const mql_deferred *d, uint64_t lease_id) {
    return (size_t)((lease_id * UINT64_C(0x9E3779B97F4A7C15)) >> 32) & (d->cap - 1);
}

static void index_put(mql_deferred *d, uint64_t lease_id, mql_deferred_link *link) {
    size_t i = home_of(d, lease_id);
    while (d->slots[i].lease_id && d->slots[i].lease_id != lease_id) i = (i + 1) & (d->cap - 1);
    if (!d->slots[i].lease_id) d->used++;
    d->slots[i].lease_id = lease_id;
    d->slots[i].link = link;
}

static void index_resize(mql_deferred *d, size_t cap) {
    mql_deferred_slot *old = d->slots;
    size_t i, old_cap = d->cap;
    d->slots = cap ? mql_xcalloc(cap, sizeof(*d->slots)) : NULL;
    d->cap = cap;
    d->used = 0;
    for (i = 0; i < old_cap; i++)
        if (old[i].lease_id) index_put(d, old[i].lease_id, old[i].link);
    free(old);
}

static ptrdiff_t index_slot(const mql_deferred *d, uint64_t lease_id) {
    size_t i;
    if (!d->cap || !lease_id) return -1;
    for (i = home_of(d, lease_id); d->slots[i].lease_id; i = (i + 1) & (d->cap - 1))
        if (d->slots[i].lease_id == lease_id) return (ptrdiff_t)i;
    return -1;
}

/* Whether home h lies cyclically in (free, at]: then the entry at `at` may
 * not move back to free, its probe would start past it. */
static int stays(size_t h, size_t free_i, size_t at) {
    return free_i <= at ? (h > free_i && h <= at) : (h > free_i || h <= at);
}

static void index_delete(mql_deferred *d, size_t i) {
    size_t j = i;
    d->slots[i].lease_id = 0;
    d->used--;
    for (;;) {
        j = (j + 1) & (d->cap - 1);
        if (!d->slots[j].lease_id) break;
        if (stays(home_of(d, d->slots[j].lease_id), i, j)) continue;
        d->slots[i] = d->slots[j];
        d->slots[j].lease_id = 0;
        i = j;
    }
}

void mql_deferred_add(mql_deferred *d, mql_deferred_link *link, const uint64_t *lease_ids,
                      const int *settled, size_t n) {
    size_t i;
    link->prev = NULL;
    link->next = d->head;
    if (d->head) d->head->prev = link;
    d->head = link;
    for (i = 0; i < n; i++) {
        if (settled[i]) continue;
        if (2 * (d->used + 1) > d->cap)
            index_resize(d, d->cap ? 2 * d->cap : DEFERRED_MIN_CAP);
        index_put(d, lease_ids[i], link);
    }
}

void mql_deferred_remove(mql_deferred *d, mql_deferred_link *link, const uint64_t *lease_ids,
                         size_t n) {
    size_t i;
    if (link->prev) link->prev->next = link->next;
    else d->head = link->next;
    if (link->next) link->next->prev = link->prev;
    link->prev = link->next = NULL;
    for (i = 0; i < n; i++) {
        ptrdiff_t at = index_slot(d, lease_ids[i]);
        /* an entry settled BUSY at the start names a lease of another release */
        if (at >= 0 && d->slots[at].link == link) index_delete(d, (size_t)at);
    }
    if (d->cap > DEFERRED_MIN_CAP && 8 * d->used < d->cap) index_resize(d, d->cap / 2);
}

mql_deferred_link *mql_deferred_find(const mql_deferred *d, uint64_t lease_id) {
    ptrdiff_t at = index_slot(d, lease_id);
    return at >= 0 ? d->slots[at].link : NULL;
}

void mql_deferred_free(mql_deferred *d) {
    free(d->slots);
    d->slots = NULL;
    d->head = NULL;
    d->cap = d->used = 0;
}
