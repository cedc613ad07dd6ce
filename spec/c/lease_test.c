/* lease_test.c -- the lease table without a server: hash lookups, the timer
 * heap's order under re-arming and removal, and handle replacement. */
#include <stdlib.h>
#include <string.h>

#include "mql_lease.h"
#include "mql_test.h"

static void finds_every_lease_by_id_after_growth(void) {
    mql_lease_table t;
    uint64_t ids[5000];
    int i, found = 0;
    char mid[32];
    mql_lease_table_init(&t);
    for (i = 0; i < 5000; i++) {
        snprintf(mid, sizeof(mid), "m%d", i);
        ids[i] = mql_lease_add(&t, mid, "t", "h", 0, 1000)->id;
    }
    for (i = 0; i < 5000; i++) {
        mql_lease *l = mql_lease_find(&t, ids[i]);
        snprintf(mid, sizeof(mid), "m%d", i);
        if (l && strcmp(l->message_id, mid) == 0) found++;
    }
    CHECK(found == 5000);
    CHECK(t.count == 5000);
    CHECK(mql_lease_find(&t, 999999) == NULL);
    mql_lease_table_free(&t);
}

static void pops_timers_in_deadline_order(void) {
    mql_lease_table t;
    mql_lease *ls[200];
    int64_t last = -1;
    int i, ordered = 1, n = 0;
    mql_lease_table_init(&t);
    srand(7);
    for (i = 0; i < 200; i++) {
        ls[i] = mql_lease_add(&t, "m", "t", "h", 0, 1000);
        mql_lease_arm(&t, ls[i], rand() % 10000);
    }
    for (i = 0; i < 200; i += 3) mql_lease_arm(&t, ls[i], rand() % 10000);  /* re-arm */
    for (i = 1; i < 200; i += 7) mql_lease_remove(&t, ls[i]);
    while (mql_lease_next(&t)) {
        mql_lease *l = mql_lease_next(&t);
        if (l->timer_ms < last) ordered = 0;
        last = l->timer_ms;
        mql_lease_disarm(&t, l);
        n++;
    }
    CHECK(ordered);
    CHECK(n == 200 - 29);
    mql_lease_table_free(&t);
}

/* Every slot names its lease and the lease its slot, each slot's time is
 * its lease's, and no child comes before its parent (4 children a node). */
static int heap_consistent(const mql_lease_table *t) {
    uint32_t i;
    for (i = 0; i < t->heap_len; i++) {
        const mql_heap_slot *s = &t->heap[i], *p = &t->heap[(i - 1) / 4];
        if (s->lease->heap_index != i || s->key != mql_heap_key(s->lease->timer_ms, s->lease->id))
            return 0;
        if (i > 0 && (s->lease->timer_ms < p->lease->timer_ms ||
                      (s->lease->timer_ms == p->lease->timer_ms && s->lease->id < p->lease->id)))
            return 0;
    }
    return 1;
}

/* Many leases through several growths of the heap, with ties (timers drawn
 * from 50 values), re-arms, disarms and removals in random order: the heap
 * stays whole after every step and pops in (timer, id) order. */
static void keeps_the_heap_whole_under_random_churn(void) {
    enum { N = 20000 };
    mql_lease_table t;
    static mql_lease *ls[N];
    int i, step, whole = 1, ordered = 1, armed = 0, n = 0;
    int64_t last_t = -1;
    uint64_t last_id = 0;
    mql_lease_table_init(&t);
    srand(11);
    for (i = 0; i < N; i++) {
        ls[i] = mql_lease_add(&t, "m", "t", "h", 0, 1000);
        mql_lease_arm(&t, ls[i], rand() % 50);
    }
    for (step = 0; step < 4 * N; step++) {
        i = rand() % N;
        if (!ls[i]) continue;
        switch (rand() % 4) {
        case 0: mql_lease_disarm(&t, ls[i]); break;
        case 1: mql_lease_remove(&t, ls[i]); ls[i] = NULL; break;
        default: mql_lease_arm(&t, ls[i], rand() % 50); break;
        }
        if (step % 997 == 0 && !heap_consistent(&t)) whole = 0;
    }
    if (!heap_consistent(&t)) whole = 0;
    for (i = 0; i < N; i++) armed += ls[i] && ls[i]->heap_index != MQL_HEAP_NONE;
    while (mql_lease_next(&t)) {
        mql_lease *l = mql_lease_next(&t);
        if (l->timer_ms < last_t || (l->timer_ms == last_t && l->id < last_id)) ordered = 0;
        last_t = l->timer_ms;
        last_id = l->id;
        mql_lease_disarm(&t, l);
        n++;
    }
    CHECK(whole);
    CHECK(ordered);
    CHECK(n == armed);
    CHECK(n > 0);
    mql_lease_table_free(&t);
}

static void replaces_the_handle_with_a_copy(void) {
    mql_lease_table t;
    mql_lease *l;
    char h[] = "first";
    mql_lease_table_init(&t);
    l = mql_lease_add(&t, "m", "t", h, 0, 1000);
    h[0] = 'X';   /* the table must have copied it */
    CHECK(strcmp(l->handle, "first") == 0);
    mql_lease_set_handle(l, "second");
    CHECK(strcmp(l->handle, "second") == 0);
    CHECK(l->deadline_ms == 1000);
    mql_lease_table_free(&t);
}

int main(void) {
    RUN(finds_every_lease_by_id_after_growth);
    RUN(pops_timers_in_deadline_order);
    RUN(keeps_the_heap_whole_under_random_churn);
    RUN(replaces_the_handle_with_a_copy);
    return TEST_REPORT("lease_test");
}
