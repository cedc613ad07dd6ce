/* deferred_index_test.c -- the deferred releases' list and index
 * (mql_deferred.c) against a plain array that says where each lease's
 * release is: adds and removals in a random order, through growth, removals
 * that shift runs back, and shrinking. (Ids drawn at random could repeat;
 * 48 random bits for 9,000 ids make that a chance in 10^7, and the seed is
 * fixed.) */
#include <stdlib.h>

#include "mql_deferred.h"
#include "mql_test.h"

#define RELEASES 3000
#define PER 3   /* leases a release */

typedef struct rel {
    mql_deferred_link link;     /* first: a link is its release */
    uint64_t ids[PER];
    int settled[PER];
    int on;
} rel;

static uint64_t next_rand(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* Every lease finds its release while that is on the list, and nothing after;
 * the list holds exactly the releases on it. */
static int agrees(const mql_deferred *d, const rel *rs) {
    const mql_deferred_link *l;
    size_t i, j, on = 0, listed = 0;
    for (i = 0; i < RELEASES; i++) {
        on += rs[i].on;
        for (j = 0; j < PER; j++) {
            const mql_deferred_link *want = rs[i].on && !rs[i].settled[j] ? &rs[i].link : NULL;
            if (mql_deferred_find(d, rs[i].ids[j]) != want) return 0;
        }
    }
    for (l = d->head; l; l = l->next) {
        if (!((const rel *)(const void *)l)->on || (l->next && l->next->prev != l)) return 0;
        listed++;
    }
    return listed == on && d->used <= d->cap / 2;
}

static void finds_each_lease_s_release_through_growth_and_shrinking(void) {
    mql_deferred d = {0};
    rel *rs = calloc(RELEASES, sizeof(*rs));
    uint64_t s = 88172645463325252ull;
    size_t i, j, step;
    for (i = 0; i < RELEASES; i++)
        for (j = 0; j < PER; j++) {
            /* random ids collide at half full, where sequential ones (the
             * lease table's) land apart: the runs a removal shifts back */
            rs[i].ids[j] = (next_rand(&s) >> 16) | 1;
            rs[i].settled[j] = j == 2 && i % 5 == 0;   /* BUSY at the start: never indexed */
        }
    for (step = 0; step < 4 * RELEASES; step++) {
        rel *r = &rs[next_rand(&s) % RELEASES];
        /* more adds than removals in the first half, the other way after */
        int add = (next_rand(&s) % 4 != 0) == (step < 2 * RELEASES);
        if (add && !r->on) mql_deferred_add(&d, &r->link, r->ids, r->settled, PER);
        else if (!add && r->on) mql_deferred_remove(&d, &r->link, r->ids, PER);
        else continue;
        r->on = add;
        if (step % 97 == 0) CHECK(agrees(&d, rs));
    }
    CHECK(agrees(&d, rs));
    for (i = 0; i < RELEASES; i++)
        if (rs[i].on) mql_deferred_remove(&d, &rs[i].link, rs[i].ids, PER), rs[i].on = 0;
    CHECK(agrees(&d, rs));
    CHECK(d.head == NULL && d.used == 0 && d.cap <= 16);
    mql_deferred_free(&d);
    free(rs);
}

int main(void) {
    RUN(finds_each_lease_s_release_through_growth_and_shrinking);
    return TEST_REPORT("deferred_index_test");
}
