/* ack_entries_test.c -- which lease each entry of an AckMessage reply
 * answers, without a server (client_fixture.h).
 *
 * An entry answers the lease whose receipt handle it names, else one of its
 * message id, else (it names neither) the lease sent at its position. The
 * leases were matched one after the other, each trying all three ways before
 * the next lease tried any: a lease whose own entry was missing took, by
 * message id or by position, the entry that named another lease of the same
 * ack, so that lease's "ok" was reported as the first one's ack (and the
 * lease the broker did ack failed PROTOCOL). And a proxy that refuses the
 * whole request answers with its top status and no entry at all (the 5.x
 * proxy's flow control, TOO_MANY_REQUESTS; a validation error): every lease
 * was reported PROTOCOL "no entry answered" instead of the proxy's code. */
#include "client_fixture.h"
#include "mql_test.h"

/* The op's event (taken; the others freed), or NULL. */
static mql_event *op_event(mql_client *c, uint64_t op) {
    mql_event *ev = mql_events_take(&c->events), *next, *found = NULL;
    for (; ev; ev = next) {
        next = ev->next;
        ev->next = NULL;
        if (!found && ev->kind == MQL_EV_OP && ev->op == op) found = ev;
        else mql_event_free(ev);
    }
    return found;
}

static void set_status(Apache__Rocketmq__V2__Status *st, Apache__Rocketmq__V2__Code code) {
    apache__rocketmq__v2__status__init(st);
    st->code = code;
    st->message = code == APACHE__ROCKETMQ__V2__CODE__OK ? "OK" : "refused";
}

/* A lease of message id with receipt handle. */
static mql_lease *lease(mql_client *c, const char *id, const char *handle) {
    int64_t now = mql_now_ms();
    mql_lease *l = mql_lease_add(&c->consumer.leases, id, "t", handle, now, 30000);
    mql_lease_arm(&c->consumer.leases, l, now + 10000);
    return l;
}

/* An ack of A and B; the reply has one entry, B's, by handle and id. */
static void an_entry_naming_another_lease_never_acks_this_one(void) {
    Apache__Rocketmq__V2__AckMessageResponse resp = APACHE__ROCKETMQ__V2__ACK_MESSAGE_RESPONSE__INIT;
    Apache__Rocketmq__V2__AckMessageResultEntry e = APACHE__ROCKETMQ__V2__ACK_MESSAGE_RESULT_ENTRY__INIT;
    Apache__Rocketmq__V2__AckMessageResultEntry *es[1] = {&e};
    Apache__Rocketmq__V2__Status top, est;
    mql_client c;
    mql_lease *a, *b;
    uint64_t ids[2], op;
    mql_event *ev;
    fixture_client_init(&c);
    a = lease(&c, "MA", "hA");
    b = lease(&c, "MB", "hB");
    ids[0] = a->id;
    ids[1] = b->id;
    op = mql_client_ack(&c, ids, 2);
    CHECK(c.calls && strcmp(c.calls->method, MQL_M_ACK) == 0);
    set_status(&top, APACHE__ROCKETMQ__V2__CODE__OK);
    set_status(&est, APACHE__ROCKETMQ__V2__CODE__OK);
    e.message_id = "MB";
    e.receipt_handle = "hB";
    e.status = &est;
    resp.status = &top;
    resp.n_entries = 1;
    resp.entries = es;
    fixture_finish_call(&c, GRPC_STATUS_OK, &resp.base);
    ev = op_event(&c, op);
    CHECK(ev && ev->nentries == 2);
    if (ev && ev->nentries == 2) {
        CHECK(!ev->entries[0].ok);   /* A: nothing answered it */
        CHECK(strcmp(ev->entries[0].code, "PROTOCOL") == 0);
        CHECK(ev->entries[1].ok);    /* B: its own entry */
    }
    CHECK(c.metrics.acks_ok == 1 && c.metrics.acks_fail == 1);
    mql_event_free(ev);
    fixture_teardown(&c);

    /* the same by message id: two leases of one message, the reply names the
     * second's handle only; the first must not take it for its id */
    fixture_client_init(&c);
    a = lease(&c, "M1", "h1");
    b = lease(&c, "M1", "h2");
    ids[0] = a->id;
    ids[1] = b->id;
    op = mql_client_ack(&c, ids, 2);
    e.message_id = "M1";
    e.receipt_handle = "h2";
    fixture_finish_call(&c, GRPC_STATUS_OK, &resp.base);
    ev = op_event(&c, op);
    CHECK(ev && ev->nentries == 2);
    if (ev && ev->nentries == 2) {
        CHECK(!ev->entries[0].ok);
        CHECK(ev->entries[1].ok);
    }
    mql_event_free(ev);
    fixture_teardown(&c);

    /* by position: the one entry names a message this ack never sent */
    fixture_client_init(&c);
    ids[0] = lease(&c, "MA", "hA")->id;
    op = mql_client_ack(&c, ids, 1);
    e.message_id = "MX";
    e.receipt_handle = "hX";
    fixture_finish_call(&c, GRPC_STATUS_OK, &resp.base);
    ev = op_event(&c, op);
    CHECK(ev && ev->nentries == 1 && !ev->entries[0].ok);
    CHECK(c.metrics.acks_ok == 0);
    mql_event_free(ev);
    fixture_teardown(&c);
}

/* An entry that names nothing still answers the lease at its position. */
static void an_anonymous_entry_answers_by_position(void) {
    Apache__Rocketmq__V2__AckMessageResponse resp = APACHE__ROCKETMQ__V2__ACK_MESSAGE_RESPONSE__INIT;
    Apache__Rocketmq__V2__AckMessageResultEntry e0 = APACHE__ROCKETMQ__V2__ACK_MESSAGE_RESULT_ENTRY__INIT,
                                                e1 = e0;
    Apache__Rocketmq__V2__AckMessageResultEntry *es[2] = {&e0, &e1};
    Apache__Rocketmq__V2__Status top, ok, bad;
    mql_client c;
    uint64_t ids[2], op;
    mql_event *ev;
    fixture_client_init(&c);
    ids[0] = lease(&c, "MA", "hA")->id;
    ids[1] = lease(&c, "MB", "hB")->id;
    op = mql_client_ack(&c, ids, 2);
    set_status(&top, APACHE__ROCKETMQ__V2__CODE__MULTIPLE_RESULTS);
    set_status(&ok, APACHE__ROCKETMQ__V2__CODE__OK);
    set_status(&bad, APACHE__ROCKETMQ__V2__CODE__INVALID_RECEIPT_HANDLE);
    e0.status = &bad;
    e1.status = &ok;
    resp.status = &top;
    resp.n_entries = 2;
    resp.entries = es;
    fixture_finish_call(&c, GRPC_STATUS_OK, &resp.base);
    ev = op_event(&c, op);
    CHECK(ev && ev->nentries == 2);
    if (ev && ev->nentries == 2) {
        CHECK(!ev->entries[0].ok && strcmp(ev->entries[0].code, "INVALID_RECEIPT_HANDLE") == 0);
        CHECK(ev->entries[1].ok);
    }
    mql_event_free(ev);
    fixture_teardown(&c);
}

/* The proxy refused the request: its top status, no entries. */
static void a_refused_request_reports_the_proxys_code(void) {
    Apache__Rocketmq__V2__AckMessageResponse resp = APACHE__ROCKETMQ__V2__ACK_MESSAGE_RESPONSE__INIT;
    Apache__Rocketmq__V2__Status top;
    mql_client c;
    uint64_t ids[2], op;
    mql_event *ev;
    fixture_client_init(&c);
    ids[0] = lease(&c, "MA", "hA")->id;
    ids[1] = lease(&c, "MB", "hB")->id;
    op = mql_client_ack(&c, ids, 2);
    set_status(&top, APACHE__ROCKETMQ__V2__CODE__TOO_MANY_REQUESTS);
    resp.status = &top;
    fixture_finish_call(&c, GRPC_STATUS_OK, &resp.base);
    ev = op_event(&c, op);
    CHECK(ev && !ev->result.ok && strcmp(ev->result.code, "TOO_MANY_REQUESTS") == 0);
    CHECK(ev && ev->nentries == 2);
    if (ev && ev->nentries == 2) {
        CHECK(strcmp(ev->entries[0].code, "TOO_MANY_REQUESTS") == 0);
        CHECK(strcmp(ev->entries[1].code, "TOO_MANY_REQUESTS") == 0);
    }
    CHECK(c.metrics.acks_fail == 2);
    mql_event_free(ev);
    fixture_teardown(&c);
}

/* An entry that names a receipt handle other than this lease's answers
 * another delivery (AckMessageActivity echoes the request's handle into its
 * entry): its message id alone must not make it this lease's. Two leases of
 * one message, a reply whose both entries name the first's handle (the
 * second a duplicate, OK): the second lease was reported acked by id though
 * nothing answered its handle, and a lone lease took an entry of a handle it
 * never sent. */
static void an_entry_of_another_handle_never_acks_by_id(void) {
    Apache__Rocketmq__V2__AckMessageResponse resp = APACHE__ROCKETMQ__V2__ACK_MESSAGE_RESPONSE__INIT;
    Apache__Rocketmq__V2__AckMessageResultEntry e0 = APACHE__ROCKETMQ__V2__ACK_MESSAGE_RESULT_ENTRY__INIT,
                                                e1 = e0;
    Apache__Rocketmq__V2__AckMessageResultEntry *es[2] = {&e0, &e1};
    Apache__Rocketmq__V2__Status top, ok, bad;
    mql_client c;
    uint64_t ids[2], op;
    mql_event *ev;
    fixture_client_init(&c);
    ids[0] = lease(&c, "M1", "h1")->id;
    ids[1] = lease(&c, "M1", "h2")->id;
    op = mql_client_ack(&c, ids, 2);
    set_status(&top, APACHE__ROCKETMQ__V2__CODE__MULTIPLE_RESULTS);
    set_status(&ok, APACHE__ROCKETMQ__V2__CODE__OK);
    set_status(&bad, APACHE__ROCKETMQ__V2__CODE__INVALID_RECEIPT_HANDLE);
    e0.message_id = e1.message_id = "M1";
    e0.receipt_handle = e1.receipt_handle = "h1";
    e0.status = &bad;
    e1.status = &ok;
    resp.status = &top;
    resp.n_entries = 2;
    resp.entries = es;
    fixture_finish_call(&c, GRPC_STATUS_OK, &resp.base);
    ev = op_event(&c, op);
    CHECK(ev && ev->nentries == 2);
    if (ev && ev->nentries == 2) {
        CHECK(!ev->entries[0].ok);   /* h1: its own entry, the first */
        CHECK(!ev->entries[1].ok);   /* h2: nothing named it */
    }
    CHECK(c.metrics.acks_ok == 0 && c.metrics.acks_fail == 2);
    mql_event_free(ev);
    fixture_teardown(&c);

    /* one lease, one entry: its id, a handle this ack never sent */
    fixture_client_init(&c);
    ids[0] = lease(&c, "MA", "hA")->id;
    op = mql_client_ack(&c, ids, 1);
    set_status(&top, APACHE__ROCKETMQ__V2__CODE__OK);
    e0.message_id = "MA";
    e0.receipt_handle = "hX";
    e0.status = &ok;
    resp.n_entries = 1;
    fixture_finish_call(&c, GRPC_STATUS_OK, &resp.base);
    ev = op_event(&c, op);
    CHECK(ev && ev->nentries == 1 && !ev->entries[0].ok);
    CHECK(c.metrics.acks_ok == 0);
    mql_event_free(ev);
    fixture_teardown(&c);

    /* an entry that names the id alone still answers by it */
    fixture_client_init(&c);
    ids[0] = lease(&c, "MA", "hA")->id;
    op = mql_client_ack(&c, ids, 1);
    e0.receipt_handle = NULL;
    fixture_finish_call(&c, GRPC_STATUS_OK, &resp.base);
    ev = op_event(&c, op);
    CHECK(ev && ev->nentries == 1 && ev->entries[0].ok);
    mql_event_free(ev);
    fixture_teardown(&c);
}

/* Two entries name the lease's handle, one OK and one failed: a reply no
 * honest proxy sends (one entry per request entry). The lease took whichever
 * came first, so the entries' order decided whether it was reported acked.
 * A failure among them stands: reported failed, the lease expires and the
 * message runs again, as any failed ack's; reported acked wrongly, it is
 * never run again if the ack did not land. */
static void a_failed_duplicate_entry_is_never_read_as_an_ack(void) {
    Apache__Rocketmq__V2__AckMessageResponse resp = APACHE__ROCKETMQ__V2__ACK_MESSAGE_RESPONSE__INIT;
    Apache__Rocketmq__V2__AckMessageResultEntry e0 = APACHE__ROCKETMQ__V2__ACK_MESSAGE_RESULT_ENTRY__INIT,
                                                e1 = e0;
    Apache__Rocketmq__V2__AckMessageResultEntry *es[2] = {&e0, &e1};
    Apache__Rocketmq__V2__Status top, ok, bad;
    mql_client c;
    uint64_t ids[2], op;
    mql_event *ev;
    fixture_client_init(&c);
    ids[0] = lease(&c, "MA", "hA")->id;
    op = mql_client_ack(&c, ids, 1);
    set_status(&top, APACHE__ROCKETMQ__V2__CODE__MULTIPLE_RESULTS);
    set_status(&ok, APACHE__ROCKETMQ__V2__CODE__OK);
    set_status(&bad, APACHE__ROCKETMQ__V2__CODE__INTERNAL_SERVER_ERROR);
    e0.message_id = e1.message_id = "MA";
    e0.receipt_handle = e1.receipt_handle = "hA";
    e0.status = &ok;
    e1.status = &bad;
    resp.status = &top;
    resp.n_entries = 2;
    resp.entries = es;
    fixture_finish_call(&c, GRPC_STATUS_OK, &resp.base);
    ev = op_event(&c, op);
    CHECK(ev && ev->nentries == 1 && !ev->entries[0].ok);
    CHECK(c.metrics.acks_ok == 0 && c.metrics.acks_fail == 1);
    mql_event_free(ev);
    fixture_teardown(&c);

    /* two leases of one handle (a delivery the stream sent twice), an
     * entry each, both OK: each its own */
    fixture_client_init(&c);
    ids[0] = lease(&c, "MA", "hA")->id;
    ids[1] = lease(&c, "MA", "hA")->id;
    op = mql_client_ack(&c, ids, 2);
    e1.status = &ok;
    fixture_finish_call(&c, GRPC_STATUS_OK, &resp.base);
    ev = op_event(&c, op);
    CHECK(ev && ev->nentries == 2);
    if (ev && ev->nentries == 2) CHECK(ev->entries[0].ok && ev->entries[1].ok);
    mql_event_free(ev);
    fixture_teardown(&c);
}

int main(void) {
    RUN(a_failed_duplicate_entry_is_never_read_as_an_ack);
    RUN(an_entry_of_another_handle_never_acks_by_id);
    RUN(an_entry_naming_another_lease_never_acks_this_one);
    RUN(an_anonymous_entry_answers_by_position);
    RUN(a_refused_request_reports_the_proxys_code);
    return TEST_REPORT("ack_entries_test");
}
