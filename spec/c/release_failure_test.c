/* release_failure_test.c -- what a lease does after its release failed,
 * without a server (client_fixture.h).
 *
 * A nack or a dead letter that failed (a broker error, UNIMPLEMENTED, a
 * timeout) went back to being renewed: the host had settled the message (it
 * got `nil, err, code` and moved on), and the core kept it hidden until
 * max_lease, an hour by default. A failed release now leaves the lease to
 * expire at the deadline it has: no more renewals, the message comes back by
 * itself, and the host may still retry the release until then. */
#include <unistd.h>

#include "client_fixture.h"
#include "mql_test.h"

/* Calls the test ended by hand: grpc still has their batches (the channel
 * points nowhere), so they are cancelled and freed only once the fixture has
 * drained the queue (teardown). */

/* Each case: a ready client (client_fixture.h) holding one lease of M1,
 * received a second ago, with remaining_ms left; returns the lease. */
static mql_lease *setup(mql_client *c, int64_t remaining_ms) {
    int64_t now;
    mql_lease *l;
    fixture_client_init(c);
    now = mql_now_ms();
    l = mql_lease_add(&c->consumer.leases, "M1", "t", "h1", now - 1000, 30000);
    l->deadline_ms = now + remaining_ms;
    mql_lease_arm(&c->consumer.leases, l, now + 5000);
    return l;
}

/* A ChangeInvisibleDuration reply: code, and handle if it minted one. */
static void finish_change(mql_client *c, Apache__Rocketmq__V2__Code code, const char *handle) {
    Apache__Rocketmq__V2__ChangeInvisibleDurationResponse resp =
        APACHE__ROCKETMQ__V2__CHANGE_INVISIBLE_DURATION_RESPONSE__INIT;
    Apache__Rocketmq__V2__Status st = APACHE__ROCKETMQ__V2__STATUS__INIT;
    st.code = code;
    st.message = code == APACHE__ROCKETMQ__V2__CODE__OK ? "ok" : "failed";
    resp.status = &st;
    resp.receipt_handle = (char *)handle;
    fixture_finish_call(c, GRPC_STATUS_OK, &resp.base);
}

/* The lease is let go at the deadline it has, and nothing renews it. */
static void check_left_to_expire(mql_client *c, mql_lease *l, int64_t deadline) {
    int64_t now = mql_now_ms();
    CHECK(mql_lease_find(&c->consumer.leases, l->id) == l);
    CHECK(l->state == MQL_LEASE_EXPIRING);
    CHECK(l->pending == MQL_PENDING_NONE);
    CHECK(l->let_go == 1);
    CHECK(l->deadline_ms == deadline);
    CHECK(l->timer_ms == deadline);
    /* the timers run: no renewal goes out before the deadline */
    mql_renew_timers(c, now, now + 1000);
    CHECK(c->calls == NULL);
    CHECK(c->consumer.renew_inflight == 0);
}

static void a_nack_the_broker_refuses_lets_the_lease_expire(void) {
    mql_client c;
    mql_lease *l = setup(&c, 20000);
    int64_t deadline = l->deadline_ms;
    uint64_t op;
    char code[32] = "";
    op = mql_client_nack(&c, l->id, 0);
    CHECK(c.calls != NULL && strcmp(c.calls->method, MQL_M_CHANGE) == 0);
    finish_change(&c, APACHE__ROCKETMQ__V2__CODE__INTERNAL_SERVER_ERROR, NULL);
    /* the host is told it failed, and the failure is counted */
    CHECK(fixture_op_result(&c, op, code, sizeof(code)) == 0);
    CHECK(strcmp(code, "INTERNAL_SERVER_ERROR") == 0);
    CHECK(c.metrics.nacks_fail == 1);
    check_left_to_expire(&c, l, deadline);
    fixture_teardown(&c);
}

static void a_dead_letter_that_fails_lets_the_lease_expire(void) {
    mql_client c;
    mql_lease *l = setup(&c, 20000);
    int64_t deadline = l->deadline_ms;
    uint64_t op;
    char code[32] = "";
    op = mql_client_dead_letter(&c, l->id, "handler");
    CHECK(c.calls != NULL && strcmp(c.calls->method, MQL_M_DLQ) == 0);
    /* the dev broker (and a proxy without the method) answers so */
    fixture_finish_call(&c, GRPC_STATUS_UNIMPLEMENTED, NULL);
    CHECK(fixture_op_result(&c, op, code, sizeof(code)) == 0);
    CHECK(strcmp(code, "UNIMPLEMENTED") == 0);
    CHECK(c.metrics.dead_letter_fail == 1);
    check_left_to_expire(&c, l, deadline);
    fixture_teardown(&c);
}

static void an_ack_that_fails_lets_the_lease_expire(void) {
    mql_client c;
    mql_lease *l = setup(&c, 20000);
    int64_t deadline = l->deadline_ms;
    uint64_t op;
    op = mql_client_ack(&c, &l->id, 1);
    CHECK(c.calls != NULL && strcmp(c.calls->method, MQL_M_ACK) == 0);
    fixture_finish_call(&c, GRPC_STATUS_DEADLINE_EXCEEDED, NULL);   /* it may have reached the broker */
    CHECK(fixture_op_result(&c, op, NULL, 0) == 0);
    CHECK(c.metrics.acks_fail == 1);
    check_left_to_expire(&c, l, deadline);
    fixture_teardown(&c);
}

/* The nack waits behind a renewal on the wire, goes out with the handle the
 * renewal's reply brought, and fails: the renewal's new deadline stands and
 * nothing renews the lease after it. */
static void a_deferred_nack_that_fails_lets_the_renewed_lease_expire(void) {
    mql_client c;
    mql_lease *l = setup(&c, 20000);
    int64_t now = mql_now_ms();
    uint64_t op;
    mql_lease_arm(&c.consumer.leases, l, now);
    mql_renew_timers(&c, now, now + 1000);   /* the renewal goes out */
    CHECK(l->state == MQL_LEASE_RENEWING && c.calls != NULL);
    op = mql_client_nack(&c, l->id, 0);
    CHECK(c.consumer.deferred.head != NULL);       /* it waits for the renewal's reply */
    finish_change(&c, APACHE__ROCKETMQ__V2__CODE__OK, "h2");
    CHECK(c.consumer.deferred.head == NULL);
    CHECK(c.calls != NULL && strcmp(c.calls->method, MQL_M_CHANGE) == 0);
    CHECK(l->pending == MQL_PENDING_NACK && l->renewals == 1);
    finish_change(&c, APACHE__ROCKETMQ__V2__CODE__INTERNAL_SERVER_ERROR, NULL);
    CHECK(fixture_op_result(&c, op, NULL, 0) == 0);
    check_left_to_expire(&c, l, mql_lease_renew_sent_ms(l) + l->window_ms);
    fixture_teardown(&c);
}

/* The host may still try again before the deadline; a nack that works ends it. */
static void a_nack_retried_after_a_failure_still_ends_the_lease(void) {
    mql_client c;
    mql_lease *l = setup(&c, 20000);
    uint64_t id = l->id;
    uint64_t op;
    mql_client_nack(&c, id, 0);
    finish_change(&c, APACHE__ROCKETMQ__V2__CODE__INTERNAL_SERVER_ERROR, NULL);
    op = mql_client_nack(&c, id, 0);
    CHECK(c.calls != NULL);
    finish_change(&c, APACHE__ROCKETMQ__V2__CODE__OK, "h2");
    CHECK(fixture_op_result(&c, op, NULL, 0) == 1);
    CHECK(mql_lease_find(&c.consumer.leases, id) == NULL);
    CHECK(c.metrics.nacks_ok == 1 && c.metrics.nacks_fail == 1);
    fixture_teardown(&c);
}

/* At its deadline the lease ends as one the host let go: lost to us, not
 * "expired while alive". */
static void the_lease_ends_at_its_deadline_as_let_go(void) {
    mql_client c;
    mql_lease *l = setup(&c, 150);
    uint64_t id = l->id;
    int64_t now;
    mql_client_nack(&c, id, 0);
    finish_change(&c, APACHE__ROCKETMQ__V2__CODE__INTERNAL_SERVER_ERROR, NULL);
    usleep(200 * 1000);
    now = mql_now_ms();
    mql_renew_timers(&c, now, now + 1000);
    CHECK(mql_lease_find(&c.consumer.leases, id) == NULL);
    CHECK(c.calls == NULL);
    CHECK(c.metrics.lost_expired == 1);
    CHECK(c.metrics.expire_while_alive == 0);
    fixture_teardown(&c);
}

/* A rejected handle still ends the lease at once: the broker no longer knows it. */
static void a_rejected_handle_still_ends_the_lease_lost(void) {
    mql_client c;
    mql_lease *l = setup(&c, 20000);
    uint64_t id = l->id;
    mql_client_nack(&c, id, 0);
    finish_change(&c, APACHE__ROCKETMQ__V2__CODE__INVALID_RECEIPT_HANDLE, NULL);
    CHECK(mql_lease_find(&c.consumer.leases, id) == NULL);
    CHECK(c.metrics.lost_rejected == 1);
    fixture_teardown(&c);
}

/* The lease's one outcome after a release's reply came too late. The safety
 * net ends a lease whose release is still on the wire two request timeouts
 * past its deadline (mql_renew.c), and tells the host LOST. A nack's or a dead
 * letter's reply that comes after that said "ok" as well: two outcomes for one
 * lease (the ack's reply already answered LEASE_LOST). Returns the op's result
 * (1 ok, 0 failed) and its code. */
static int late_release_result(int dead_letter, char *code, size_t codelen) {
    mql_client c;
    mql_lease *l = setup(&c, 20000);
    uint64_t id = l->id, op;
    int64_t now = mql_now_ms();
    int result, lost = 0;
    mql_event *ev, *next;
    op = dead_letter ? mql_client_dead_letter(&c, id, "handler") : mql_client_nack(&c, id, 0);
    CHECK(c.calls != NULL);
    /* the reply is late: the deadline passed two request timeouts ago */
    l->deadline_ms = now - 2 * c.request_timeout_ms - 1;
    mql_lease_arm(&c.consumer.leases, l, now);
    mql_renew_timers(&c, now, now + 1000);
    CHECK(mql_lease_find(&c.consumer.leases, id) == NULL);
    CHECK(c.metrics.lost_expired == 1);
    for (ev = mql_events_take(&c.events); ev; ev = next) {
        next = ev->next;
        if (ev->kind == MQL_EV_LEASE && ev->lease_id == id && ev->lease_state == MQL_LEASE_LOST) lost++;
        mql_event_free(ev);
    }
    CHECK(lost == 1);
    if (dead_letter) {
        Apache__Rocketmq__V2__ForwardMessageToDeadLetterQueueResponse resp =
            APACHE__ROCKETMQ__V2__FORWARD_MESSAGE_TO_DEAD_LETTER_QUEUE_RESPONSE__INIT;
        Apache__Rocketmq__V2__Status st = APACHE__ROCKETMQ__V2__STATUS__INIT;
        st.code = APACHE__ROCKETMQ__V2__CODE__OK;
        resp.status = &st;
        fixture_finish_call(&c, GRPC_STATUS_OK, &resp.base);
    } else {
        finish_change(&c, APACHE__ROCKETMQ__V2__CODE__OK, "h2");
    }
    result = fixture_op_result(&c, op, code, codelen);
    CHECK(c.metrics.nacks_ok == 0 && c.metrics.dead_lettered.n == 0);
    fixture_teardown(&c);
    return result;
}

static void a_nack_whose_reply_comes_after_the_lease_was_lost_fails(void) {
    char code[32] = "";
    CHECK(late_release_result(0, code, sizeof(code)) == 0);
    CHECK(strcmp(code, "LEASE_LOST") == 0);
}

static void a_dead_letter_whose_reply_comes_after_the_lease_was_lost_fails(void) {
    char code[32] = "";
    CHECK(late_release_result(1, code, sizeof(code)) == 0);
    CHECK(strcmp(code, "LEASE_LOST") == 0);
}

/* A nack is a ChangeInvisibleDuration, as a renewal is: one that got no
 * reply (a timeout, a cancel) may have been applied, and the broker then
 * hands the message on after the delay under a handle we never saw, while
 * this lease waits for its deadline. A renewal and the budget's own nack mark
 * the lease uncertain then; the host's nack left it certain. A nack the
 * broker refused was not applied: certain. */
static void a_nack_with_no_reply_marks_the_lease_uncertain(void) {
    grpc_status_code none[2] = {GRPC_STATUS_DEADLINE_EXCEEDED, GRPC_STATUS_CANCELLED};
    size_t k;
    for (k = 0; k < 2; k++) {
        mql_client c;
        mql_lease *l = setup(&c, 20000);
        uint64_t op = mql_client_nack(&c, l->id, 0);
        fixture_finish_call(&c, none[k], NULL);
        CHECK(fixture_op_result(&c, op, NULL, 0) == 0);
        CHECK(c.metrics.nacks_fail == 1);
        CHECK(l->uncertain == 1);
        check_left_to_expire(&c, l, l->deadline_ms);
        fixture_teardown(&c);
    }
    {
        mql_client c;
        mql_lease *l = setup(&c, 20000);
        mql_client_nack(&c, l->id, 0);
        finish_change(&c, APACHE__ROCKETMQ__V2__CODE__INTERNAL_SERVER_ERROR, NULL);
        CHECK(l->uncertain == 0);
        fixture_teardown(&c);
    }
}

int main(void) {
    RUN(a_nack_with_no_reply_marks_the_lease_uncertain);
    RUN(a_nack_the_broker_refuses_lets_the_lease_expire);
    RUN(a_dead_letter_that_fails_lets_the_lease_expire);
    RUN(an_ack_that_fails_lets_the_lease_expire);
    RUN(a_deferred_nack_that_fails_lets_the_renewed_lease_expire);
    RUN(a_nack_retried_after_a_failure_still_ends_the_lease);
    RUN(the_lease_ends_at_its_deadline_as_let_go);
    RUN(a_rejected_handle_still_ends_the_lease_lost);
    RUN(a_nack_whose_reply_comes_after_the_lease_was_lost_fails);
    RUN(a_dead_letter_whose_reply_comes_after_the_lease_was_lost_fails);
    return TEST_REPORT("release_failure_test");
}
