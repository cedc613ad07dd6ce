/* release_hold_test.c -- releases while the session moves to another proxy,
 * without a server (client_fixture.h).
 *
 * When the proxy in use dies, the session opens a channel to the next one,
 * asks for the route and sends our settings on a new Telemetry stream; until
 * they come back that proxy has no Telemetry channel for our client id. A
 * RocketMQ 5.2.0 proxy then fails an AckMessage or ChangeInvisibleDuration
 * with INTERNAL_SERVER_ERROR: ReceiptHandleGroupKey.getChannelId dereferences
 * the channel GrpcChannelManager.getChannel(clientId) did not find. A failed
 * ack lets its lease expire on purpose (it may have landed), so the message
 * ran twice under the plain policy: two such acks in one failover run of
 * cluster_spec. A release started in that window is now held, and goes out
 * when the settings come back; one whose lease cannot wait that long goes
 * out in time to reach the broker before its deadline, as it did before. */
#include <unistd.h>

#include "client_fixture.h"
#include "mql_test.h"


/* A ready client holding one lease of M1 with remaining_ms left, whose
 * session has lost its proxy (`reconnecting`); returns the lease. */
static mql_lease *setup(mql_client *c, int64_t remaining_ms) {
    return fixture_reconnecting_lease(c, remaining_ms, 5000);
}

/* The newest call of the client, or NULL. */
static const char *newest_method(const mql_client *c) {
    return c->calls ? c->calls->method : "";
}

/* An AckMessage reply whose one entry has code (5.2.0 puts the proxy's
 * exception there: INTERNAL_SERVER_ERROR). */
static void finish_ack(mql_client *c, Apache__Rocketmq__V2__Code code) {
    Apache__Rocketmq__V2__AckMessageResponse resp = APACHE__ROCKETMQ__V2__ACK_MESSAGE_RESPONSE__INIT;
    Apache__Rocketmq__V2__AckMessageResultEntry e = APACHE__ROCKETMQ__V2__ACK_MESSAGE_RESULT_ENTRY__INIT;
    Apache__Rocketmq__V2__AckMessageResultEntry *es[1] = {&e};
    Apache__Rocketmq__V2__Status st = APACHE__ROCKETMQ__V2__STATUS__INIT, est = st;
    st.code = APACHE__ROCKETMQ__V2__CODE__OK;
    est.code = code;
    est.message = code == APACHE__ROCKETMQ__V2__CODE__OK ? "ok" : "NullPointerException";
    e.message_id = "M1";
    e.receipt_handle = "h1";
    e.status = &est;
    resp.status = &st;
    resp.n_entries = 1;
    resp.entries = es;
    fixture_finish_call(c, GRPC_STATUS_OK, &resp.base);
}

/* The session's reconnect as its timers run it: a new Telemetry stream, our
 * settings sent on it. Returns the stream. */
static mql_call *reopen_telemetry(mql_client *c) {
    int64_t now = mql_now_ms();
    c->telemetry_retry_at = now - 1;
    mql_session_timers(c, now, now + 60000);
    return c->telemetry;
}

/* The proxy answers the stream with the settings it stored for us. */
static void settings_come_back(mql_client *c, mql_call *stream) {
    Apache__Rocketmq__V2__TelemetryCommand cmd = APACHE__ROCKETMQ__V2__TELEMETRY_COMMAND__INIT;
    Apache__Rocketmq__V2__Settings s = APACHE__ROCKETMQ__V2__SETTINGS__INIT;
    grpc_byte_buffer *bb;
    cmd.command_case = APACHE__ROCKETMQ__V2__TELEMETRY_COMMAND__COMMAND_SETTINGS;
    cmd.settings = &s;
    bb = fixture_pack(&cmd.base);
    stream->ops->on_message(c, stream, bb);
    grpc_byte_buffer_destroy(bb);
}

static void an_ack_while_reconnecting_waits_for_the_settings_to_come_back(void) {
    mql_client c;
    mql_lease *l = setup(&c, 20000);
    uint64_t id = l->id, op;
    mql_call *stream;
    op = mql_client_ack(&c, &id, 1);
    /* nothing goes out: the new proxy would fail it (no channel for our id) */
    CHECK(c.calls == NULL);
    CHECK(fixture_op_result(&c, op, NULL, 0) == -1);
    /* the session re-opens Telemetry; still no settings, still held */
    stream = reopen_telemetry(&c);
    CHECK(stream != NULL);
    CHECK(strcmp(newest_method(&c), MQL_M_TELEMETRY) == 0);
    /* its lease timer runs meanwhile: still held, no call */
    mql_renew_timers(&c, mql_now_ms(), mql_now_ms() + 1000);
    CHECK(strcmp(newest_method(&c), MQL_M_TELEMETRY) == 0);
    if (!stream) {
        fixture_teardown(&c);
        return;
    }
    settings_come_back(&c, stream);
    CHECK(c.reconnecting == 0);
    /* now the ack goes out, once, with the lease's handle, and is answered */
    CHECK(strcmp(newest_method(&c), MQL_M_ACK) == 0);
    CHECK(c.consumer.deferred.head == NULL);
    CHECK(c.metrics.releases_held == 1);
    finish_ack(&c, APACHE__ROCKETMQ__V2__CODE__OK);
    CHECK(fixture_op_result(&c, op, NULL, 0) == 1);
    CHECK(mql_lease_find(&c.consumer.leases, id) == NULL);
    CHECK(c.metrics.acks_ok == 1 && c.metrics.acks_fail == 0);
    fixture_teardown(&c);
}

/* Nacks and dead letters go through the same door. */
static void a_nack_and_a_dead_letter_while_reconnecting_are_held_too(void) {
    mql_client c;
    mql_lease *l = setup(&c, 20000), *l2;
    uint64_t id = l->id, id2;
    mql_call *stream;
    l2 = mql_lease_add(&c.consumer.leases, "M2", "t", "h2", mql_now_ms(), 30000);
    id2 = l2->id;
    mql_client_nack(&c, id, 0);
    mql_client_dead_letter(&c, id2, "handler");
    CHECK(c.calls == NULL);
    stream = reopen_telemetry(&c);
    if (!stream) {
        CHECK(stream != NULL);
        fixture_teardown(&c);
        return;
    }
    settings_come_back(&c, stream);
    CHECK(c.metrics.releases_held == 2);
    /* both went out: two calls besides the stream */
    CHECK(c.calls && c.calls->next && c.calls->next->next == stream);
    CHECK(c.consumer.deferred.head == NULL);
    fixture_teardown(&c);
}

/* A release held while its lease's deadline draws near goes out while a call
 * can still reach the broker in time (a new channel's setup plus K x p99,
 * MQL_RECONNECT_NEEDS_MS at first), as it went out before: it may work (the
 * proxy may have our settings by then), and if it fails the lease expires at
 * its deadline as any failed ack's does. */
static void a_held_ack_goes_out_before_its_deadline_and_fails_as_before(void) {
    mql_client c;
    mql_lease *l = setup(&c, 20000);
    uint64_t id = l->id, op;
    int64_t now, deadline;
    char code[32] = "";
    op = mql_client_ack(&c, &id, 1);
    CHECK(c.calls == NULL);
    /* its lease's timer is when it must go at the latest */
    CHECK(l->timer_ms <= l->deadline_ms - MQL_RECONNECT_NEEDS_MS);
    CHECK(l->timer_ms > mql_now_ms() + 2000);
    /* time passes (the reconnect drags on): the deadline is now near */
    now = mql_now_ms();
    l->deadline_ms = deadline = now + MQL_RECONNECT_NEEDS_MS - 100;
    mql_lease_arm(&c.consumer.leases, l, now);
    mql_renew_timers(&c, now, now + 1000);
    CHECK(strcmp(newest_method(&c), MQL_M_ACK) == 0);
    CHECK(c.consumer.deferred.head == NULL);
    finish_ack(&c, APACHE__ROCKETMQ__V2__CODE__INTERNAL_SERVER_ERROR);
    CHECK(fixture_op_result(&c, op, code, sizeof(code)) == 0);
    CHECK(strcmp(code, "INTERNAL_SERVER_ERROR") == 0);
    CHECK(c.metrics.acks_fail == 1);
    /* let expire at the deadline it has, never renewed */
    CHECK(mql_lease_find(&c.consumer.leases, id) == l);
    CHECK(l->state == MQL_LEASE_EXPIRING && l->let_go && l->timer_ms == deadline);
    fixture_teardown(&c);
}

/* Settings that do not come back within a request timeout (a proxy down for
 * a restart, not a failover): the release goes out then, as it did before the
 * hold, so a drain's nack waits no longer than behind a renewal in flight. */
static void a_held_ack_waits_one_request_timeout_at_most(void) {
    mql_client c;
    mql_lease *l = setup(&c, 20000);
    uint64_t id = l->id;
    int64_t now;
    mql_client_ack(&c, &id, 1);
    CHECK(c.calls == NULL);
    now = mql_now_ms();
    CHECK(l->timer_ms <= now + c.request_timeout_ms);
    /* a request timeout has passed; still reconnecting */
    if (c.consumer.deferred.head)
        MQL_RELEASE_OF(c.consumer.deferred.head)->held_at -= c.request_timeout_ms;
    mql_lease_arm(&c.consumer.leases, l, now);
    mql_renew_timers(&c, now, now + 1000);
    CHECK(strcmp(newest_method(&c), MQL_M_ACK) == 0);
    CHECK(c.consumer.deferred.head == NULL);
    CHECK(l->timer_ms == l->deadline_ms);   /* the deadline check again */
    fixture_teardown(&c);
}

/* One whose deadline is already that near is not held at all. */
static void an_ack_with_too_little_time_left_is_not_held(void) {
    mql_client c;
    mql_lease *l = setup(&c, MQL_RECONNECT_NEEDS_MS / 2);
    uint64_t id = l->id;
    mql_client_ack(&c, &id, 1);
    CHECK(strcmp(newest_method(&c), MQL_M_ACK) == 0);
    CHECK(c.consumer.deferred.head == NULL);
    CHECK(c.metrics.releases_held == 0);
    fixture_teardown(&c);
}

/* Close (client_stop) runs the deferred list once it is stopping: a held
 * release fails CLOSED at once instead of waiting for a proxy nobody will
 * talk to again, and nothing goes out. */
static void a_close_while_reconnecting_fails_held_releases_closed(void) {
    mql_client c;
    mql_lease *l = setup(&c, 20000);
    uint64_t id = l->id, op;
    char code[32] = "";
    op = mql_client_ack(&c, &id, 1);
    CHECK(c.calls == NULL);
    c.stopping = 1;
    mql_release_run_deferred(&c);
    CHECK(fixture_op_result(&c, op, code, sizeof(code)) == 0);
    CHECK(strcmp(code, "CLOSED") == 0);
    CHECK(c.calls == NULL);
    CHECK(c.consumer.deferred.head == NULL);
    fixture_teardown(&c);
}

/* nack_all is what close and the signal watcher's emergency exit give back
 * with: it must not wait for a proxy that may never come back. */
static void nack_all_while_reconnecting_goes_out_at_once(void) {
    mql_client c;
    setup(&c, 20000);
    mql_client_nack_all(&c, 0);
    CHECK(strcmp(newest_method(&c), MQL_M_CHANGE) == 0);
    CHECK(c.consumer.deferred.head == NULL);
    fixture_teardown(&c);
}

/* A session that is not reconnecting sends at once, as always. */
static void an_ack_on_a_ready_session_goes_out_at_once(void) {
    mql_client c;
    mql_lease *l = setup(&c, 20000);
    uint64_t id = l->id;
    c.reconnecting = 0;
    mql_client_ack(&c, &id, 1);
    CHECK(strcmp(newest_method(&c), MQL_M_ACK) == 0);
    CHECK(c.metrics.releases_held == 0);
    fixture_teardown(&c);
}

int main(void) {
    RUN(an_ack_while_reconnecting_waits_for_the_settings_to_come_back);
    RUN(a_nack_and_a_dead_letter_while_reconnecting_are_held_too);
    RUN(a_held_ack_goes_out_before_its_deadline_and_fails_as_before);
    RUN(a_held_ack_waits_one_request_timeout_at_most);
    RUN(an_ack_with_too_little_time_left_is_not_held);
    RUN(a_close_while_reconnecting_fails_held_releases_closed);
    RUN(nack_all_while_reconnecting_goes_out_at_once);
    RUN(an_ack_on_a_ready_session_goes_out_at_once);
    return TEST_REPORT("release_hold_test");
}
