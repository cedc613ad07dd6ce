/* renew_handle_test.c -- which receipt handle a lease keeps after a
 * renewal's reply, and so which one its ack sends, without a server
 * (client_fixture.h).
 *
 * A ChangeInvisibleDuration leaves the message where it is: the proxy builds
 * the new handle from the request's broker, queue id and queue offset
 * (MQClientAPIImpl.changeInvisibleTimeAsync, ExtraInfoUtil.buildExtraInfo).
 * A reply that said OK with a handle naming another message, or none we can
 * read where ours had the proxy's layout, was taken all the same: the ack
 * that waited for the reply went out with it, and acked another message's
 * checkpoint (or nothing) while ours revived. Such a reply is broken as one
 * with no handle is: a PROTOCOL error, uncertain, and the lease keeps the
 * handle it has. */
#include "client_fixture.h"
#include "mql_test.h"

#define OLD_HANDLE "100 1700000000000 30000 0 0 broker-a 2 103 7 4096"

/* A lease of OLD_HANDLE whose renewal is out, and an ack of it waiting for
 * the reply (the op is returned in *ack_op). */
static mql_lease *renewing_with_ack_waiting(mql_client *c, uint64_t *ack_op) {
    int64_t now;
    mql_lease *l;
    fixture_client_init(c);
    now = mql_now_ms();
    l = mql_lease_add(&c->consumer.leases, "M1", "t", OLD_HANDLE, now - 10000, 30000);
    mql_lease_arm(&c->consumer.leases, l, now);
    mql_renew_timers(c, now, now + 1000);
    *ack_op = mql_release_ack(c, &l->id, 1);
    return l;
}

/* The renewal answers OK with handle; returns the receipt handle of the ack
 * that went out after it ("" if none did). */
static const char *renewal_answers(mql_client *c, const mql_lease *l, const char *handle,
                                   char *sent, size_t len) {
    Apache__Rocketmq__V2__ChangeInvisibleDurationResponse resp =
        APACHE__ROCKETMQ__V2__CHANGE_INVISIBLE_DURATION_RESPONSE__INIT;
    Apache__Rocketmq__V2__Status st = APACHE__ROCKETMQ__V2__STATUS__INIT;
    st.code = APACHE__ROCKETMQ__V2__CODE__OK;
    st.message = "OK";
    resp.status = &st;
    resp.receipt_handle = (char *)handle;
    fixture_finish_call(c, GRPC_STATUS_OK, &resp.base);
    /* the ack is the newest call now, and sends the lease's handle */
    snprintf(sent, len, "%s", c->calls && strcmp(c->calls->method, MQL_M_ACK) == 0 ? l->handle : "");
    return sent;
}

static void an_ok_naming_another_message_keeps_the_handle(void) {
    mql_client c;
    mql_lease *l;
    uint64_t op;
    char sent[128];
    l = renewing_with_ack_waiting(&c, &op);
    CHECK(l->state == MQL_LEASE_RENEWING && l->pending == MQL_PENDING_ACK);
    /* offset 104: the next message of the batch */
    renewal_answers(&c, l, "104 1700000031000 30000 0 0 broker-a 2 104 7 4096", sent, sizeof(sent));
    CHECK(strcmp(sent, OLD_HANDLE) == 0);
    CHECK(l->renewals == 0 && l->uncertain == 1 && c.metrics.renew_uncertain == 1);
    fixture_teardown(&c);
}

static void an_ok_with_an_unreadable_handle_keeps_the_handle(void) {
    mql_client c;
    mql_lease *l;
    uint64_t op;
    char sent[128];
    l = renewing_with_ack_waiting(&c, &op);
    renewal_answers(&c, l, "1700000031000", sent, sizeof(sent));
    CHECK(strcmp(sent, OLD_HANDLE) == 0);
    CHECK(l->renewals == 0 && l->uncertain == 1);
    fixture_teardown(&c);
}

/* The handle of the same message is taken (field 0 set to its offset,
 * mql_handle_after_change), and the ack sends it. */
static void an_ok_naming_the_message_is_taken(void) {
    mql_client c;
    mql_lease *l;
    uint64_t op;
    char sent[128];
    l = renewing_with_ack_waiting(&c, &op);
    renewal_answers(&c, l, "100 1700000031000 30000 0 0 broker-a 2 103 7 4096", sent, sizeof(sent));
    CHECK(strcmp(sent, "103 1700000031000 30000 0 0 broker-a 2 103 7 4096") == 0);
    CHECK(l->renewals == 1 && l->uncertain == 0);
    fixture_teardown(&c);
}

int main(void) {
    RUN(an_ok_naming_another_message_keeps_the_handle);
    RUN(an_ok_with_an_unreadable_handle_keeps_the_handle);
    RUN(an_ok_naming_the_message_is_taken);
    return TEST_REPORT("renew_handle_test");
}
