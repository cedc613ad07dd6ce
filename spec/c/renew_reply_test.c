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

int main(void) {
    RUN(an_ok_without_a_handle_is_a_protocol_error);
    return TEST_REPORT("renew_reply_test");
}
