/* renew_first_test.c -- renewals first: a receive waits while the renewals
 * are behind, without a server (client_fixture.h).
 *
 * Issue 37 item 1: a consumer receiving as fast as it could made renewals due
 * faster than the thread sent them (a million leases at invisible 120 s:
 * lateness p99 9.4 s; a hundred thousand at invisible 10 s: leases lost),
 * because every receive went out at once whatever the due queue's age. A
 * receive asked for while the oldest due renewal is older than the pace's
 * threshold (mql_pace_behind_ms) now waits, unsent, until they catch up, and
 * still ends within its long poll and a request timeout. */
#include "client_fixture.h"
#include "mql_test.h"

/* A ready client holding n leases whose renewals fell due late_ms ago, with
 * room for `inflight` renewals at once. */
static void setup(mql_client *c, int n, int64_t late_ms, int inflight) {
    int64_t now;
    int i;
    fixture_client_init(c);
    c->request_timeout_ms = 3000;
    c->consumer.pace.max_inflight = inflight;
    now = mql_now_ms();
    for (i = 0; i < n; i++) {
        char id[16];
        mql_lease *l;
        snprintf(id, sizeof(id), "M%d", i);
        l = mql_lease_add(&c->consumer.leases, id, "t", "h1", now - 20000, 30000);
        l->deadline_ms = now + 10000;
        mql_lease_arm(&c->consumer.leases, l, now - late_ms);
    }
}

/* Calls in flight by method. */
static int calls_of(const mql_client *c, const char *method) {
    const mql_call *call;
    int n = 0;
    for (call = c->calls; call; call = call->next) n += strcmp(call->method, method) == 0;
    return n;
}

/* The newest renewal answered OK with a new handle. */
static void renewal_answered(mql_client *c) {
    Apache__Rocketmq__V2__ChangeInvisibleDurationResponse resp =
        APACHE__ROCKETMQ__V2__CHANGE_INVISIBLE_DURATION_RESPONSE__INIT;
    Apache__Rocketmq__V2__Status st = APACHE__ROCKETMQ__V2__STATUS__INIT;
    st.code = APACHE__ROCKETMQ__V2__CODE__OK;
    st.message = "ok";
    resp.status = &st;
    resp.receipt_handle = "h2";
    fixture_finish_call(c, GRPC_STATUS_OK, &resp.base);
}

/* The number of messages op's event carries (-1: no event, -2: it failed). */
static int op_messages(mql_client *c, uint64_t op, char *code, size_t codelen) {
    mql_event *ev = mql_events_take(&c->events), *next;
    int found = -1;
    for (; ev; ev = next) {
        next = ev->next;
        if (ev->kind == MQL_EV_OP && ev->op == op) {
            found = ev->result.ok ? (int)ev->nmsgs : -2;
            if (code) snprintf(code, codelen, "%s", ev->result.code);
        }
        mql_event_free(ev);
    }
    return found;
}

static void without_overdue_renewals_a_receive_goes_out_at_once(void) {
    mql_client c;
    int64_t now;
    uint64_t op;
    setup(&c, 3, -5000, 2);   /* due in 5 s */
    now = mql_now_ms();
    mql_renew_timers(&c, now, now + 60000);
    CHECK(!mql_renew_behind(&c));
    op = mql_receive_start(&c, 32, 20000, 0);
    CHECK(op != 0);
    CHECK(calls_of(&c, MQL_M_RECEIVE) == 1);
    CHECK(c.metrics.receives_held == 0);
    CHECK(c.metrics.renew_queue_age_ms == 0);
    fixture_teardown(&c);
}

/* One renewal sent late alone (the thread woke late) is no backlog. */
static void one_late_renewal_holds_no_receive(void) {
    mql_client c;
    int64_t now;
    setup(&c, 1, 500, 2);
    now = mql_now_ms();
    mql_renew_timers(&c, now, now + 60000);
    CHECK(calls_of(&c, MQL_M_CHANGE) == 1);
    CHECK(!mql_renew_behind(&c));
    CHECK(c.metrics.renew_queue_age_ms >= 500);   /* the age is reported all the same */
    mql_receive_start(&c, 32, 20000, 0);
    CHECK(calls_of(&c, MQL_M_RECEIVE) == 1);
    fixture_teardown(&c);
}

static void with_renewals_overdue_a_receive_waits_until_they_catch_up(void) {
    mql_client c;
    int64_t now;
    uint64_t op;
    int i;
    setup(&c, 4, 500, 2);   /* 500 ms late, two at a time: two wait */
    now = mql_now_ms();
    mql_renew_timers(&c, now, now + 60000);
    CHECK(calls_of(&c, MQL_M_CHANGE) == 2);
    CHECK(mql_renew_behind(&c));
    CHECK(c.metrics.renew_queue_age_ms >= 500);
    op = mql_receive_start(&c, 32, 20000, 0);
    CHECK(calls_of(&c, MQL_M_RECEIVE) == 0);          /* held, unsent */
    CHECK(c.metrics.receives_held == 1);
    now = mql_now_ms();
    CHECK(mql_receive_timers(&c, now, now + 60000) <= now + 20000);   /* wakes by its poll's end */
    CHECK(calls_of(&c, MQL_M_RECEIVE) == 0);          /* still behind */
    /* the two renewals answer: the other two go out, none waits any more */
    for (i = 0; i < 2; i++) renewal_answered(&c);
    now = mql_now_ms();
    mql_renew_timers(&c, now, now + 60000);
    CHECK(calls_of(&c, MQL_M_CHANGE) == 2);
    CHECK(!mql_renew_behind(&c));
    CHECK(calls_of(&c, MQL_M_RECEIVE) == 0);          /* the receive side's turn comes after */
    mql_receive_timers(&c, now, now + 60000);
    CHECK(calls_of(&c, MQL_M_RECEIVE) == 1);
    CHECK(op_messages(&c, op, NULL, 0) == -1);        /* it is the receive in flight now */
    CHECK(c.metrics.receives_held_empty == 0);
    fixture_teardown(&c);
}

/* Behind, the next pass lets twice the bound out (mql_pace.h): the queue a
 * fill made due drains into the broker instead of waiting for replies one
 * bound at a time; caught up, the bound is the plain one again. */
static void behind_the_next_pass_sends_up_to_twice_the_bound(void) {
    mql_client c;
    int64_t now;
    int i;
    setup(&c, 8, 500, 2);
    now = mql_now_ms();
    mql_renew_timers(&c, now, now + 60000);
    CHECK(calls_of(&c, MQL_M_CHANGE) == 2);           /* not behind yet: the plain bound */
    CHECK(mql_renew_behind(&c));
    mql_renew_timers(&c, now, now + 60000);
    CHECK(calls_of(&c, MQL_M_CHANGE) == 4);           /* behind: twice the bound */
    CHECK(mql_renew_behind(&c));
    for (i = 0; i < 4; i++) renewal_answered(&c);
    now = mql_now_ms();
    mql_renew_timers(&c, now, now + 60000);
    CHECK(calls_of(&c, MQL_M_CHANGE) == 4);           /* the last four, still behind */
    for (i = 0; i < 4; i++) renewal_answered(&c);
    now = mql_now_ms();
    mql_renew_timers(&c, now, now + 60000);
    CHECK(calls_of(&c, MQL_M_CHANGE) == 0);
    CHECK(!mql_renew_behind(&c));
    fixture_teardown(&c);
}

/* Still behind when its long poll (at least the proxy's 5 s) has passed: it
 * is answered as a poll that found nothing, within what it promised. */
static void a_held_receive_still_behind_after_its_poll_is_answered_empty(void) {
    mql_client c;
    int64_t now;
    uint64_t op;
    setup(&c, 4, 500, 2);
    now = mql_now_ms();
    mql_renew_timers(&c, now, now + 60000);
    op = mql_receive_start(&c, 32, 1000, 0);
    CHECK(c.consumer.waiting != NULL);
    /* before its poll is over it waits on */
    mql_receive_timers(&c, now + 4000, now + 60000);
    CHECK(op_messages(&c, op, NULL, 0) == -1);
    mql_receive_timers(&c, now + 5100, now + 60000);
    CHECK(op_messages(&c, op, NULL, 0) == 0);
    CHECK(calls_of(&c, MQL_M_RECEIVE) == 0);
    CHECK(c.consumer.waiting == NULL);
    CHECK(c.metrics.receives_held_empty == 1);
    fixture_teardown(&c);
}

/* Caught up when less than a whole poll of its await is left: sent, it could
 * end a poll later than promised; it is answered empty, and the host's next
 * receive goes out at once. With await 20 s and 3 s waited it goes out with
 * the 17 s left. */
static void a_held_receive_keeps_its_deadline_when_it_goes_out_late(void) {
    mql_client c;
    int64_t now;
    uint64_t late, early;
    int i;
    setup(&c, 4, 500, 2);
    now = mql_now_ms();
    mql_renew_timers(&c, now, now + 60000);
    late = mql_receive_start(&c, 32, 6000, 0);
    early = mql_receive_start(&c, 32, 20000, 0);
    CHECK(calls_of(&c, MQL_M_RECEIVE) == 0);
    for (i = 0; i < 2; i++) renewal_answered(&c);
    mql_renew_timers(&c, mql_now_ms(), mql_now_ms() + 60000);
    CHECK(!mql_renew_behind(&c));
    mql_receive_timers(&c, now + 3000, now + 60000);
    CHECK(op_messages(&c, late, NULL, 0) == 0);       /* 3 s left of 6: no whole poll */
    CHECK(calls_of(&c, MQL_M_RECEIVE) == 1);          /* the 20 s one went out */
    CHECK(c.calls && c.calls->op == early);
    CHECK(mql_receive_start(&c, 32, 6000, 0) != 0);
    CHECK(calls_of(&c, MQL_M_RECEIVE) == 2);          /* the next one at once */
    fixture_teardown(&c);
}

static void cancelling_the_receives_answers_the_held_ones(void) {
    mql_client c;
    int64_t now;
    uint64_t op;
    char code[MQL_CODELEN] = "";
    setup(&c, 4, 500, 2);
    now = mql_now_ms();
    mql_renew_timers(&c, now, now + 60000);
    op = mql_receive_start(&c, 32, 20000, 0);
    mql_receive_cancel_all(&c);
    CHECK(op_messages(&c, op, code, sizeof(code)) == -2);
    CHECK(strcmp(code, "CANCELLED") == 0);
    CHECK(c.consumer.waiting == NULL);
    fixture_teardown(&c);
}

int main(void) {
    RUN(without_overdue_renewals_a_receive_goes_out_at_once);
    RUN(one_late_renewal_holds_no_receive);
    RUN(with_renewals_overdue_a_receive_waits_until_they_catch_up);
    RUN(behind_the_next_pass_sends_up_to_twice_the_bound);
    RUN(a_held_receive_still_behind_after_its_poll_is_answered_empty);
    RUN(a_held_receive_keeps_its_deadline_when_it_goes_out_late);
    RUN(cancelling_the_receives_answers_the_held_ones);
    return TEST_REPORT("renew_first_test");
}
