/* renew_reply_test.c -- a renewal's reply that says OK but brings no receipt
 * handle, without a server (client_fixture.h).
 *
 * Every ChangeInvisibleDuration that succeeds mints a new handle, and the
 * proxy returns it. One that said OK with none was taken as a failure, but
 * counted as an error whose code was the empty string (errors{op="renew",
 * code=""}) and as a plain failure, though the OK says the change was made:
 * the broker holds a handle (and a deadline) we never saw, which is what
 * renew_uncertain counts. It is a PROTOCOL error now, counted uncertain, and
 * the lease goes on renewing with the handle it has, as after a lost reply. */
#include "client_fixture.h"
#include "mql_test.h"

static uint64_t error_count(const mql_metrics *m, const char *op, const char *code) {
    int i;
    for (i = 0; i < m->nerrors; i++)
        if (strcmp(m->errors[i].op, op) == 0 && strcmp(m->errors[i].code, code) == 0) return m->errors[i].n;
    return 0;
}

static void an_ok_without_a_handle_is_a_protocol_error(void) {
    Apache__Rocketmq__V2__ChangeInvisibleDurationResponse resp =
        APACHE__ROCKETMQ__V2__CHANGE_INVISIBLE_DURATION_RESPONSE__INIT;
    Apache__Rocketmq__V2__Status st = APACHE__ROCKETMQ__V2__STATUS__INIT;
    mql_client c;
    mql_lease *l;
    int64_t now, deadline;
    fixture_client_init(&c);
    now = mql_now_ms();
    l = mql_lease_add(&c.consumer.leases, "M1", "t", "h1", now - 10000, 30000);
    deadline = l->deadline_ms;
    mql_lease_arm(&c.consumer.leases, l, now);
    mql_renew_timers(&c, now, now + 1000);   /* the renewal goes out */
    CHECK(l->state == MQL_LEASE_RENEWING && c.calls && strcmp(c.calls->method, MQL_M_CHANGE) == 0);
    st.code = APACHE__ROCKETMQ__V2__CODE__OK;
    st.message = "OK";
    resp.status = &st;
    fixture_finish_call(&c, GRPC_STATUS_OK, &resp.base);
    CHECK(error_count(&c.metrics, "renew", "") == 0);
    CHECK(error_count(&c.metrics, "renew", "PROTOCOL") == 1);
    CHECK(c.metrics.renew_uncertain == 1 && c.metrics.renew_fail == 0);
    CHECK(l->uncertain == 1);
    /* not a renewal: the old handle and deadline stay, and it is tried again */
    CHECK(strcmp(l->handle, "h1") == 0 && l->renewals == 0 && l->deadline_ms == deadline);
    CHECK(l->state == MQL_LEASE_HELD && l->timer_ms < deadline);
    fixture_teardown(&c);
}

/* A renewal that failed UNAVAILABLE never reached a broker (the channel was
 * down: grpc fails such a call at once), and one CANCELLED was ended by us:
 * neither says how long a renewal takes. Both were fed to the pace's p99 as
 * latencies of ~0 ms, so a proxy outage, when every renewal that cannot wait
 * fails at once, pulled the p99 down and with it the renewal margin (K x p99)
 * and what a retry on the new proxy must have left
 * (mql_change_new_channel_needs_ms), when the retries needed them. A timeout
 * is still slowness, and still counted. */
static void a_renewal_that_reached_no_broker_is_no_latency(void) {
    mql_client c;
    mql_lease *l;
    int64_t now;
    int i;
    uint32_t samples;
    fixture_client_init(&c);
    /* a broker whose p99 is 4 s: 1 renewal in 64 took 4 s */
    mql_pace_observe(&c.consumer.pace, 4000);
    for (i = 0; i < 63; i++) mql_pace_observe(&c.consumer.pace, 1);
    CHECK(c.consumer.pace.p99_ms == 4096);
    for (i = 0; i < 63; i++) mql_pace_observe(&c.consumer.pace, 1);   /* the next sample recomputes */
    samples = c.consumer.pace.samples;
    now = mql_now_ms();
    l = mql_lease_add(&c.consumer.leases, "M1", "t", "h1", now - 10000, 30000);
    mql_lease_arm(&c.consumer.leases, l, now);
    mql_renew_timers(&c, now, now + 1000);
    CHECK(l->state == MQL_LEASE_RENEWING);
    fixture_finish_call(&c, GRPC_STATUS_UNAVAILABLE, NULL);
    CHECK(c.consumer.pace.samples == samples);
    CHECK(c.consumer.pace.p99_ms == 4096);
    /* our own cancel: the same */
    now = mql_now_ms();
    mql_lease_arm(&c.consumer.leases, l, now);
    mql_renew_timers(&c, now, now + 1000);
    CHECK(l->state == MQL_LEASE_RENEWING);
    fixture_finish_call(&c, GRPC_STATUS_CANCELLED, NULL);
    CHECK(c.consumer.pace.samples == samples);
    /* a timeout is counted */
    now = mql_now_ms();
    mql_lease_arm(&c.consumer.leases, l, now);
    mql_renew_timers(&c, now, now + 1000);
    CHECK(l->state == MQL_LEASE_RENEWING);
    fixture_finish_call(&c, GRPC_STATUS_DEADLINE_EXCEEDED, NULL);
    CHECK(c.consumer.pace.samples == samples + 1);
    fixture_teardown(&c);
}

int main(void) {
    RUN(an_ok_without_a_handle_is_a_protocol_error);
    RUN(a_renewal_that_reached_no_broker_is_no_latency);
    return TEST_REPORT("renew_reply_test");
}
