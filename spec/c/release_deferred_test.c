/* release_deferred_test.c -- what the deferred releases cost while the
 * session reconnects, without a server (client_fixture.h).
 *
 * While the session moves to another proxy, every release is held on the
 * consumer's deferred list (mql_release.c, release_held), and a long
 * reconnect piles them up: a consumer acking 1,000 messages a second holds
 * 1,000 more each second. The thread's events that may let one of them go
 * out -- a held release's timer, a renewal's reply, a lease lost -- each
 * concern the releases of one lease. Each used to walk the whole list under
 * the client's lock, so N held releases going out one timer at a time cost
 * O(N^2) and stalled the renewals behind that lock. They are counted here by
 * the releases looked at (c->consumer.deferred_looked_at), never by time.
 *
 * `release_deferred_test N` (N a number) measures instead of asserting: it
 * holds N single-lease acks, makes 100 of them due, runs the timers once and
 * prints what that pass looked at and how long it held the lock.
 */
#include <time.h>

#include "client_fixture.h"
#include "mql_test.h"

#define BOUND_SLACK 4   /* looked at beyond the releases due: a constant */

/* A reconnecting client (its one lease from the fixture not due for a
 * minute) holding n leases acked in batches of `batch`, each release held for
 * the reconnect; the leases' ids in ids (n of them). */
static void hold_acks(mql_client *c, uint64_t *ids, size_t n, size_t batch) {
    int64_t now;
    size_t i;
    fixture_reconnecting_lease(c, 60000, 60000);
    now = mql_now_ms();
    for (i = 0; i < n; i++) {
        char mid[32];
        mql_lease *l;
        snprintf(mid, sizeof(mid), "D%zu", i);
        l = mql_lease_add(&c->consumer.leases, mid, "t", "h", now, 60000);
        l->deadline_ms = now + 60000;
        mql_lease_arm(&c->consumer.leases, l, l->deadline_ms);
        ids[i] = l->id;
    }
    for (i = 0; i < n; i += batch) mql_client_ack(c, ids + i, n - i < batch ? n - i : batch);
}

/* The leases ids[0..n) can wait no longer (each deadline within what a call on
 * a new channel needs): their held releases are due, their timers now. */
static void make_due(mql_client *c, const uint64_t *ids, size_t n) {
    int64_t now = mql_now_ms();
    size_t i;
    for (i = 0; i < n; i++) {
        mql_lease *l = mql_lease_find(&c->consumer.leases, ids[i]);
        l->deadline_ms = now + mql_change_new_channel_needs_ms(c) / 2;
        mql_lease_arm(&c->consumer.leases, l, now);
    }
}

static size_t calls_of(const mql_client *c, const char *method) {
    const mql_call *call;
    size_t n = 0;
    for (call = c->calls; call; call = call->next) n += strcmp(call->method, method) == 0;
    return n;
}

/* A lease due for a renewal that cannot wait for the reconnect (too little
 * left before its deadline), its timer now; returns it. */
static mql_lease *renewal_due_now(mql_client *c) {
    int64_t now = mql_now_ms();
    mql_lease *l = mql_lease_add(&c->consumer.leases, "R", "t", "hr", now, 60000);
    l->deadline_ms = now + c->request_timeout_ms + mql_change_new_channel_needs_ms(c) / 2;
    mql_lease_arm(&c->consumer.leases, l, now);
    return l;
}

#define HELD 1000
#define DUE 100

/* Each due timer looks at its own release: one pass over DUE due releases
 * among HELD looks at DUE of them (it looked at DUE x HELD). */
static void due_held_releases_cost_what_is_due_not_what_is_held(size_t batch) {
    mql_client c;
    uint64_t *ids = mql_xcalloc(HELD, sizeof(*ids));
    uint64_t before;
    hold_acks(&c, ids, HELD, batch);
    CHECK(calls_of(&c, MQL_M_ACK) == 0);
    CHECK(c.metrics.releases_held == HELD / batch);
    make_due(&c, ids, DUE);
    before = c.consumer.deferred_looked_at;
    mql_renew_timers(&c, mql_now_ms(), mql_now_ms() + 1000);
    /* every due release went out, one call each, and no other */
    CHECK(calls_of(&c, MQL_M_ACK) == DUE / batch);
    CHECK(c.consumer.deferred_looked_at - before <= DUE + BOUND_SLACK);
    if (c.consumer.deferred_looked_at - before > DUE + BOUND_SLACK)
        fprintf(stderr, "  looked at %llu releases for %d due\n",
                (unsigned long long)(c.consumer.deferred_looked_at - before), DUE);
    /* the rest still go out when the settings come back */
    CHECK(fixture_reconnect_completes(&c));
    CHECK(calls_of(&c, MQL_M_ACK) == HELD / batch);
    free(ids);
    fixture_teardown(&c);
}

static void due_single_acks_cost_what_is_due(void) {
    due_held_releases_cost_what_is_due_not_what_is_held(1);
}

static void due_batch_acks_cost_what_is_due(void) {
    due_held_releases_cost_what_is_due_not_what_is_held(20);
}

/* A renewal that cannot wait goes out while the releases are held; its reply
 * (a dead proxy: UNAVAILABLE) concerns no held release. */
static void a_renewal_reply_looks_at_no_held_release_of_other_leases(void) {
    mql_client c;
    uint64_t *ids = mql_xcalloc(HELD, sizeof(*ids));
    uint64_t before;
    hold_acks(&c, ids, HELD, 1);
    renewal_due_now(&c);
    mql_renew_timers(&c, mql_now_ms(), mql_now_ms() + 1000);
    CHECK(calls_of(&c, MQL_M_CHANGE) == 1);
    before = c.consumer.deferred_looked_at;
    fixture_finish_call(&c, GRPC_STATUS_UNAVAILABLE, NULL);
    CHECK(c.consumer.deferred_looked_at - before <= BOUND_SLACK);
    CHECK(calls_of(&c, MQL_M_ACK) == 0);
    free(ids);
    fixture_teardown(&c);
}

/* A lease lost at its deadline fails the releases that wait for it: none of
 * the held ones. */
static void a_lost_lease_looks_at_no_held_release_of_other_leases(void) {
    mql_client c;
    uint64_t *ids = mql_xcalloc(HELD, sizeof(*ids));
    uint64_t before;
    mql_lease *l;
    hold_acks(&c, ids, HELD, 1);
    l = mql_lease_add(&c.consumer.leases, "L", "t", "hl", mql_now_ms(), 60000);
    l->deadline_ms = mql_now_ms() - 1;
    mql_lease_arm(&c.consumer.leases, l, l->deadline_ms);
    before = c.consumer.deferred_looked_at;
    mql_renew_timers(&c, mql_now_ms(), mql_now_ms() + 1000);
    CHECK(c.metrics.lost_expired == 1);
    CHECK(c.consumer.deferred_looked_at - before <= BOUND_SLACK);
    free(ids);
    fixture_teardown(&c);
}

/* A held ack's latest moment is its lease's deadline minus what a call on a
 * new channel needs (K x the renewals' p99, plus a connection's setup). When a
 * renewal's reply raises that p99, the moment moves earlier: an ack that can
 * wait no longer then goes out with that reply, not at the later time its
 * timer was armed for. */
static void a_held_ack_goes_out_when_slower_renewals_move_its_moment_earlier(void) {
    mql_client c;
    mql_lease *l = fixture_reconnecting_lease(&c, 60000, 60000);
    uint64_t id = l->id;
    l->deadline_ms = mql_now_ms() + mql_change_new_channel_needs_ms(&c) + 1500;
    mql_client_ack(&c, &id, 1);
    CHECK(calls_of(&c, MQL_M_ACK) == 0);
    renewal_due_now(&c);
    mql_renew_timers(&c, mql_now_ms(), mql_now_ms() + 1000);
    CHECK(calls_of(&c, MQL_M_CHANGE) == 1);
    /* the renewals' p99 as a reply's sample would have moved it: a new call
     * now needs the whole request timeout */
    c.consumer.pace.p99_ms = c.request_timeout_ms;
    fixture_finish_call(&c, GRPC_STATUS_UNAVAILABLE, NULL);
    CHECK(calls_of(&c, MQL_M_ACK) == 1);
    fixture_teardown(&c);
}

/* The measurement: n held single acks, DUE of them due, one timer pass. */
static int measure(size_t n) {
    mql_client c;
    uint64_t *ids = mql_xcalloc(n, sizeof(*ids));
    uint64_t before;
    struct timespec t0, t1;
    double ms;
    hold_acks(&c, ids, n, 1);
    make_due(&c, ids, DUE);
    before = c.consumer.deferred_looked_at;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    mql_renew_timers(&c, mql_now_ms(), mql_now_ms() + 1000);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
    printf("held %zu, due %d: looked at %llu releases, %.2f ms under the lock (%.3f ms a due "
           "timer), %zu acks sent\n",
           n, DUE, (unsigned long long)(c.consumer.deferred_looked_at - before), ms, ms / DUE,
           calls_of(&c, MQL_M_ACK));
    free(ids);
    fixture_teardown(&c);
    return 0;
}

int main(int argc, char **argv) {
    if (argc > 1) return measure((size_t)strtoull(argv[1], NULL, 10));
    RUN(due_single_acks_cost_what_is_due);
    RUN(due_batch_acks_cost_what_is_due);
    RUN(a_renewal_reply_looks_at_no_held_release_of_other_leases);
    RUN(a_lost_lease_looks_at_no_held_release_of_other_leases);
    RUN(a_held_ack_goes_out_when_slower_renewals_move_its_moment_earlier);
    return TEST_REPORT("release_deferred_test");
}
