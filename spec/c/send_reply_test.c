/* send_reply_test.c -- what a SendMessage reply must carry before a send is
 * reported stored, without a server (client_fixture.h).
 *
 * A send is one message in one call, and the RocketMQ 5 proxy answers it with
 * one SendResultEntry carrying the message id
 * (org.apache.rocketmq.proxy.grpc.v2.producer.SendMessageActivity). A reply
 * that says OK with no message id, or with more or fewer entries than the one
 * message, is no answer an honest proxy gives: the send fails PROTOCOL rather
 * than hand the caller "" as the id of a stored message (which the command
 * line printed, and which a transaction took to its commit). */
#include "client_fixture.h"
#include "mql_producer.h"
#include "mql_test.h"

/* The message id and result of op among the events (taken and freed); msg, if
 * given, gets the result's message. */
static int send_result_msg(mql_client *c, uint64_t op, char *id, size_t idlen, char *code, size_t codelen,
                           char *msg, size_t msglen) {
    mql_event *ev = mql_events_take(&c->events), *next;
    int found = -1;
    for (; ev; ev = next) {
        next = ev->next;
        if (ev->kind == MQL_EV_OP && ev->op == op) {
            found = ev->result.ok;
            snprintf(id, idlen, "%s", ev->message_id ? ev->message_id : "(none)");
            snprintf(code, codelen, "%s", ev->result.code);
            if (msg) snprintf(msg, msglen, "%s", ev->result.msg);
        }
        mql_event_free(ev);
    }
    return found;
}

static int send_result(mql_client *c, uint64_t op, char *id, size_t idlen, char *code, size_t codelen) {
    return send_result_msg(c, op, id, idlen, code, codelen, NULL, 0);
}

static uint64_t producer_sends(mql_client *c) {
    mql_send_opts o;
    fixture_client_init(c);
    c->type = MQL_PRODUCER;
    snprintf(c->hostname, sizeof(c->hostname), "send-reply-test");
    memset(&o, 0, sizeof(o));
    return mql_producer_send(c, "t", (const uint8_t *)"body", 4, &o);
}

/* Answers the send in flight OK with n entries, each OK with message id id. */
static void answer(mql_client *c, size_t n, char *id) {
    Apache__Rocketmq__V2__SendMessageResponse resp = APACHE__ROCKETMQ__V2__SEND_MESSAGE_RESPONSE__INIT;
    Apache__Rocketmq__V2__SendResultEntry e[2], *ep[2] = {&e[0], &e[1]};
    Apache__Rocketmq__V2__Status st = APACHE__ROCKETMQ__V2__STATUS__INIT;
    size_t i;
    st.code = APACHE__ROCKETMQ__V2__CODE__OK;
    st.message = "OK";
    for (i = 0; i < n; i++) {
        apache__rocketmq__v2__send_result_entry__init(&e[i]);
        e[i].status = &st;
        e[i].message_id = id;
        e[i].offset = (int64_t)i + 7;
    }
    resp.status = &st;
    resp.n_entries = n;
    resp.entries = ep;
    fixture_finish_call(c, GRPC_STATUS_OK, &resp.base);
}

/* The id the send in flight minted (its call keeps it to check the reply's). */
static char *sent_id(mql_client *c) {
    static char id[64];
    snprintf(id, sizeof(id), "%s", c->calls && c->calls->ctx ? (const char *)c->calls->ctx : "");
    return id;
}

static void an_ok_with_its_message_id_is_stored(void) {
    mql_client c;
    char id[64], code[32], *mine;
    uint64_t op = producer_sends(&c);
    mine = sent_id(&c);
    CHECK(strlen(mine) == 34);
    answer(&c, 1, mine);
    CHECK(send_result(&c, op, id, sizeof(id), code, sizeof(code)) == 1);
    CHECK(strcmp(id, mine) == 0);
    CHECK(c.metrics.sent_ok == 1 && c.metrics.sent_fail == 0);
    fixture_teardown(&c);
}

static void an_ok_without_a_message_id_is_a_protocol_error(void) {
    mql_client c;
    char id[64], code[32], empty[] = "";
    uint64_t op = producer_sends(&c);
    answer(&c, 1, empty);
    CHECK(send_result(&c, op, id, sizeof(id), code, sizeof(code)) == 0);
    CHECK(strcmp(code, "PROTOCOL") == 0);
    CHECK(c.metrics.sent_ok == 0 && c.metrics.sent_fail == 1);
    fixture_teardown(&c);
}

/* An OK naming another message: the proxy answers the UNIQ_KEY the send set
 * from system_properties.message_id (LocalMessageService and the broker's
 * SendResult alike, MessageClientIDSetter.getUniqID), so another id is no
 * answer about this message. It was reported stored under that id, which a
 * transaction then committed (EndTransaction for someone else's message). */
static void an_ok_naming_another_message_is_a_protocol_error(void) {
    mql_client c;
    char id[64], code[32], msg[256], other[] = "01000000000000000000000000000000FF";
    uint64_t op = producer_sends(&c);
    answer(&c, 1, other);
    CHECK(send_result_msg(&c, op, id, sizeof(id), code, sizeof(code), msg, sizeof(msg)) == 0);
    CHECK(strcmp(code, "PROTOCOL") == 0);
    CHECK(strstr(msg, other) != NULL);
    CHECK(c.metrics.sent_ok == 0 && c.metrics.sent_fail == 1);
    fixture_teardown(&c);
}

static void two_entries_for_one_message_are_a_protocol_error(void) {
    mql_client c;
    char id[64], code[32];
    uint64_t op = producer_sends(&c);
    answer(&c, 2, sent_id(&c));
    CHECK(send_result(&c, op, id, sizeof(id), code, sizeof(code)) == 0);
    CHECK(strcmp(code, "PROTOCOL") == 0);
    fixture_teardown(&c);
}

/* A reply that does not decode within the unpack's budget (2 million empty
 * entries, 4 MB on the wire, would be about 150 MB unpacked): the send fails
 * PROTOCOL, and says the reply did not decode, not that it had no status. */
static void a_reply_past_the_unpack_budget_is_a_protocol_error(void) {
    Apache__Rocketmq__V2__SendMessageResponse resp = APACHE__ROCKETMQ__V2__SEND_MESSAGE_RESPONSE__INIT;
    Apache__Rocketmq__V2__SendResultEntry empty = APACHE__ROCKETMQ__V2__SEND_RESULT_ENTRY__INIT;
    Apache__Rocketmq__V2__Status st = APACHE__ROCKETMQ__V2__STATUS__INIT;
    const size_t many = 2000000;
    Apache__Rocketmq__V2__SendResultEntry **entries = malloc(many * sizeof(*entries));
    mql_client c;
    char id[64], code[32], msg[256];
    uint64_t op = producer_sends(&c);
    size_t i;
    for (i = 0; i < many; i++) entries[i] = &empty;
    st.code = APACHE__ROCKETMQ__V2__CODE__OK;
    st.message = "OK";
    resp.status = &st;
    resp.n_entries = many;
    resp.entries = entries;
    fixture_finish_call(&c, GRPC_STATUS_OK, &resp.base);
    free(entries);
    CHECK(send_result_msg(&c, op, id, sizeof(id), code, sizeof(code), msg, sizeof(msg)) == 0);
    CHECK(strcmp(code, "PROTOCOL") == 0);
    if (!strstr(msg, "did not decode")) fprintf(stderr, "  message: %s\n", msg);
    CHECK(strstr(msg, "SendMessage: the reply did not decode") != NULL);
    CHECK(c.metrics.sent_ok == 0 && c.metrics.sent_fail == 1);
    fixture_teardown(&c);
}

int main(void) {
    RUN(an_ok_with_its_message_id_is_stored);
    RUN(an_ok_without_a_message_id_is_a_protocol_error);
    RUN(an_ok_naming_another_message_is_a_protocol_error);
    RUN(two_entries_for_one_message_are_a_protocol_error);
    RUN(a_reply_past_the_unpack_budget_is_a_protocol_error);
    return TEST_REPORT("send_reply_test");
}
