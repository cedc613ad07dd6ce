/* receive_caps_test.c -- what one ReceiveMessage may bring, without a server:
 * a receive is started on a client whose channel points nowhere (grpc
 * connects lazily), and its stream's frames are handed to the ops the receive
 * gave its call, as the client thread would.
 *
 * Issue 20 item 9: the stream had no message cap -- a proxy (or anything
 * between) that sent more messages than the batch asked for had each one
 * turned into a lease and handed over -- and max_inflight_bytes was checked
 * only before a receive, so one receive could add up to 32 x max_body. The
 * core now takes at most the batch, and at most the byte budget the host
 * gives the receive (always at least one message, so a body larger than the
 * budget still makes progress); from the first message past either bound, the
 * rest of the stream is given back at once and counted by reason. */
#include <stdlib.h>
#include <string.h>

#include "client_fixture.h"
#include "mql_test.h"

/* One ReceiveMessage frame with a message of body_len bytes and this handle;
 * with crc32, a body digest of that CRC32 (a wrong one makes it corrupted). */
static grpc_byte_buffer *message_frame_digest(const char *id, const char *handle, size_t body_len,
                                              const char *crc32) {
    Apache__Rocketmq__V2__ReceiveMessageResponse resp =
        APACHE__ROCKETMQ__V2__RECEIVE_MESSAGE_RESPONSE__INIT;
    Apache__Rocketmq__V2__Message m = APACHE__ROCKETMQ__V2__MESSAGE__INIT;
    Apache__Rocketmq__V2__SystemProperties sp = APACHE__ROCKETMQ__V2__SYSTEM_PROPERTIES__INIT;
    Apache__Rocketmq__V2__Resource topic = APACHE__ROCKETMQ__V2__RESOURCE__INIT;
    Apache__Rocketmq__V2__Digest digest = APACHE__ROCKETMQ__V2__DIGEST__INIT;
    uint8_t *buf, *body = calloc(1, body_len + 1);
    size_t len;
    grpc_slice s;
    grpc_byte_buffer *bb;
    topic.name = "t";
    sp.message_id = (char *)id;
    sp.receipt_handle = (char *)handle;
    sp.body_encoding = APACHE__ROCKETMQ__V2__ENCODING__IDENTITY;
    if (crc32) {
        digest.type = APACHE__ROCKETMQ__V2__DIGEST_TYPE__CRC32;
        digest.checksum = (char *)crc32;
        sp.body_digest = &digest;
    }
    m.topic = &topic;
    m.system_properties = &sp;
    m.body.data = body;
    m.body.len = body_len;
    resp.content_case = APACHE__ROCKETMQ__V2__RECEIVE_MESSAGE_RESPONSE__CONTENT_MESSAGE;
    resp.message = &m;
    buf = malloc(protobuf_c_message_get_packed_size(&resp.base));
    len = protobuf_c_message_pack(&resp.base, buf);
    s = grpc_slice_from_copied_buffer((const char *)buf, len);
    bb = grpc_raw_byte_buffer_create(&s, 1);
    grpc_slice_unref(s);
    free(buf);
    free(body);
    return bb;
}

static grpc_byte_buffer *message_frame_with(const char *id, const char *handle, size_t body_len) {
    return message_frame_digest(id, handle, body_len, NULL);
}

static grpc_byte_buffer *message_frame(const char *id, size_t body_len) {
    return message_frame_with(id, "0 1700000000000 30000 0 0 broker-a 0 0 0", body_len);
}

static grpc_byte_buffer *status_frame(Apache__Rocketmq__V2__Code code) {
    Apache__Rocketmq__V2__ReceiveMessageResponse resp =
        APACHE__ROCKETMQ__V2__RECEIVE_MESSAGE_RESPONSE__INIT;
    Apache__Rocketmq__V2__Status st = APACHE__ROCKETMQ__V2__STATUS__INIT;
    uint8_t buf[64];
    size_t len;
    grpc_slice s;
    grpc_byte_buffer *bb;
    st.code = code;
    resp.content_case = APACHE__ROCKETMQ__V2__RECEIVE_MESSAGE_RESPONSE__CONTENT_STATUS;
    resp.status = &st;
    len = protobuf_c_message_pack(&resp.base, buf);
    s = grpc_slice_from_copied_buffer((const char *)buf, len);
    bb = grpc_raw_byte_buffer_create(&s, 1);
    grpc_slice_unref(s);
    return bb;
}

static grpc_byte_buffer *ok_status_frame(void) {
    return status_frame(APACHE__ROCKETMQ__V2__CODE__OK);
}

/* The receive's stream brings frames, then ends OK; returns the result event. */
static mql_event *stream(mql_client *c, mql_call *call, grpc_byte_buffer **frames, size_t n) {
    size_t i;
    mql_event *ev;
    for (i = 0; i < n; i++) {
        call->ops->on_message(c, call, frames[i]);
        grpc_byte_buffer_destroy(frames[i]);
    }
    mql_base_unlink(c, call);   /* as the hub does before on_done */
    call->status = GRPC_STATUS_OK;
    call->ops->on_done(c, call);
    ev = mql_events_take(&c->events);
    while (ev && ev->kind != MQL_EV_OP) {   /* lease events of the given-back ones */
        mql_event *next = ev->next;
        ev->next = NULL;
        mql_event_free(ev);
        ev = next;
    }
    return ev;
}

static uint64_t reason_count(const mql_reason_table *t, const char *reason) {
    int i;
    for (i = 0; i < t->n; i++)
        if (strcmp(t->r[i].reason, reason) == 0) return t->r[i].n;
    return 0;
}

static void a_stream_with_more_messages_than_the_batch_is_cut(void) {
    mql_client c;
    mql_call *call;
    mql_event *ev;
    grpc_byte_buffer *frames[5];
    fixture_client_init(&c);
    mql_client_receive(&c, 2, 5000, 0);
    call = c.calls;
    CHECK(call != NULL);
    if (!call) return;
    frames[0] = ok_status_frame();
    frames[1] = message_frame("M1", 10);
    frames[2] = message_frame("M2", 10);
    frames[3] = message_frame("M3", 10);
    frames[4] = message_frame("M4", 10);
    ev = stream(&c, call, frames, 5);
    CHECK(ev && ev->result.ok && ev->nmsgs == 2);
    CHECK(ev && ev->nmsgs == 2 && strcmp(ev->msgs[0].id, "M1") == 0 &&
          strcmp(ev->msgs[1].id, "M2") == 0);
    CHECK(c.metrics.received == 4);
    CHECK(reason_count(&c.metrics.given_back, "over_batch") == 2);
    /* the two extra ones are leases being given back (a nack each), not held */
    CHECK(c.consumer.leases.count == 4);
    CHECK(c.calls != NULL);   /* their nacks are on the wire */
    mql_event_free(ev);
    fixture_client_finish(&c, call);
}

static void a_receive_stops_taking_at_its_byte_budget(void) {
    mql_client c;
    mql_call *call;
    mql_event *ev;
    grpc_byte_buffer *frames[5];
    fixture_client_init(&c);
    mql_client_receive(&c, 16, 5000, 250);
    call = c.calls;
    CHECK(call != NULL);
    if (!call) return;
    frames[0] = ok_status_frame();
    frames[1] = message_frame("M1", 100);
    frames[2] = message_frame("M2", 100);
    frames[3] = message_frame("M3", 100);   /* 300 > 250: back, and all after it */
    frames[4] = message_frame("M4", 10);
    ev = stream(&c, call, frames, 5);
    CHECK(ev && ev->result.ok && ev->nmsgs == 2);
    CHECK(reason_count(&c.metrics.given_back, "over_bytes") == 2);
    mql_event_free(ev);
    fixture_client_finish(&c, call);

    /* a first message larger than the whole budget is still taken: progress */
    fixture_client_init(&c);
    mql_client_receive(&c, 16, 5000, 50);
    call = c.calls;
    if (!call) return;
    frames[0] = ok_status_frame();
    frames[1] = message_frame("BIG", 100);
    frames[2] = message_frame("M2", 10);
    ev = stream(&c, call, frames, 3);
    CHECK(ev && ev->nmsgs == 1 && strcmp(ev->msgs[0].id, "BIG") == 0);
    CHECK(reason_count(&c.metrics.given_back, "over_bytes") == 1);
    mql_event_free(ev);
    fixture_client_finish(&c, call);
}

static uint64_t error_count(const mql_metrics *m, const char *op, const char *code) {
    int i;
    for (i = 0; i < m->nerrors; i++)
        if (strcmp(m->errors[i].op, op) == 0 && strcmp(m->errors[i].code, code) == 0) return m->errors[i].n;
    return 0;
}

/* The proxy sends one status; it sends a second, an error, when it fails
 * after its OK (ReceiveMessageResponseStreamWriter's catch). A later status
 * replaced the earlier whatever it said: an error followed by an OK (or by
 * MESSAGE_NOT_FOUND) was an empty batch, neither reported nor counted. */
static void a_later_status_never_hides_an_error(void) {
    mql_client c;
    mql_call *call;
    mql_event *ev;
    grpc_byte_buffer *frames[3];
    fixture_client_init(&c);
    mql_client_receive(&c, 4, 5000, 0);
    call = c.calls;
    CHECK(call != NULL);
    if (!call) return;
    frames[0] = status_frame(APACHE__ROCKETMQ__V2__CODE__FORBIDDEN);
    frames[1] = status_frame(APACHE__ROCKETMQ__V2__CODE__MESSAGE_NOT_FOUND);
    frames[2] = ok_status_frame();
    ev = stream(&c, call, frames, 3);
    CHECK(ev && !ev->result.ok && strcmp(ev->result.code, "FORBIDDEN") == 0);
    CHECK(error_count(&c.metrics, "receive", "FORBIDDEN") == 1);
    mql_event_free(ev);
    fixture_client_finish(&c, call);

    /* an OK, then the proxy's error: the error stands */
    fixture_client_init(&c);
    mql_client_receive(&c, 4, 5000, 0);
    call = c.calls;
    if (!call) return;
    frames[0] = ok_status_frame();
    frames[1] = status_frame(APACHE__ROCKETMQ__V2__CODE__INTERNAL_SERVER_ERROR);
    ev = stream(&c, call, frames, 2);
    CHECK(ev && !ev->result.ok && strcmp(ev->result.code, "INTERNAL_SERVER_ERROR") == 0);
    mql_event_free(ev);
    fixture_client_finish(&c, call);
}

/* Several brokers (session_test: the route's readable masters are kept): the
 * receives take turns naming them, so every broker's queues are popped. */
static void receives_take_turns_naming_the_route_brokers(void) {
    static char a[] = "broker-a", b[] = "broker-b";
    static char *two[] = {a, b};
    static const char *want[] = {"broker-a", "broker-b", "broker-a", "broker-b", "broker-a"};
    mql_consumer_part cs;
    int i;
    memset(&cs, 0, sizeof(cs));
    CHECK(mql_receive_next_broker(&cs) == NULL);   /* no route yet */
    cs.brokers = two;
    cs.nbrokers = 2;
    for (i = 0; i < 5; i++) {
        const char *name = mql_receive_next_broker(&cs);
        CHECK(name && strcmp(name, want[i]) == 0);
    }
    cs.nbrokers = 1;   /* a route of one broker: always that one */
    for (i = 0; i < 3; i++) CHECK(strcmp(mql_receive_next_broker(&cs), "broker-a") == 0);
}

/* n copies of c, a string to free. */
static char *repeat(char c, size_t n) {
    char *s = malloc(n + 1);
    memset(s, c, n);
    s[n] = '\0';
    return s;
}

static mql_lease *lease_of(mql_client *c, const char *message_id) {
    mql_lease *l = NULL;
    uint64_t id;
    for (id = 1; id < c->consumer.leases.next_id && !l; id++) {
        l = mql_lease_find(&c->consumer.leases, id);
        if (l && strcmp(l->message_id, message_id) != 0) l = NULL;
    }
    return l;
}

/* A message id longer than any RocketMQ makes (MQL_MESSAGE_ID_MAX) was taken
 * like any other; the binding keeps an id's length in 16 bits, so one past
 * 65,534 bytes could not be made into a Lua message, and the whole receive's
 * event was dropped: every message of the batch given back, however honest
 * (a server that kept sending it starved the consumer). Now such a frame is
 * malformed (message_id_too_long): no lease, never renewed, so the broker
 * hands it out again after its invisible duration; the others of the stream
 * are taken as usual. A long receipt handle is no such case: the lease keeps
 * one that outgrows its room in an allocation of its own. */
static void a_message_id_too_long_costs_only_its_own_message(void) {
    char *too_long = repeat('A', 70000), *longest = repeat('B', MQL_MESSAGE_ID_MAX);
    char *past = repeat('C', MQL_MESSAGE_ID_MAX + 1), *handle = repeat('7', 70000);
    mql_client c;
    mql_call *call;
    mql_event *ev;
    mql_lease *l;
    grpc_byte_buffer *frames[7];
    size_t i;
    fixture_client_init(&c);
    mql_client_receive(&c, 8, 5000, 0);
    call = c.calls;
    CHECK(call != NULL);
    if (!call) return;
    frames[0] = ok_status_frame();
    frames[1] = message_frame("M1", 10);
    frames[2] = message_frame(too_long, 10);
    frames[3] = message_frame(longest, 10);
    frames[4] = message_frame(past, 10);
    frames[5] = message_frame_with("M5", handle, 10);
    frames[6] = message_frame("M6", 10);
    ev = stream(&c, call, frames, 7);
    CHECK(ev && ev->result.ok && ev->nmsgs == 4);
    for (i = 0; ev && i < ev->nmsgs; i++) CHECK(strlen(ev->msgs[i].id) <= MQL_MESSAGE_ID_MAX);
    CHECK(ev && ev->nmsgs == 4 && strcmp(ev->msgs[0].id, "M1") == 0 &&
          strcmp(ev->msgs[1].id, longest) == 0 && strcmp(ev->msgs[2].id, "M5") == 0 &&
          strcmp(ev->msgs[3].id, "M6") == 0);
    CHECK(reason_count(&c.metrics.malformed, "message_id_too_long") == 2);
    CHECK(error_count(&c.metrics, "receive", "PROTOCOL") == 1);
    /* the two refused ones hold no lease: nothing renews or releases them */
    CHECK(c.consumer.leases.count == 4);
    CHECK(lease_of(&c, too_long) == NULL && lease_of(&c, past) == NULL);
    l = lease_of(&c, "M5");
    CHECK(l && strcmp(l->handle, handle) == 0);
    mql_event_free(ev);
    fixture_client_finish(&c, call);

    /* a batch of nothing else: the receive fails PROTOCOL, holding nothing */
    fixture_client_init(&c);
    mql_client_receive(&c, 8, 5000, 0);
    call = c.calls;
    if (!call) return;
    frames[0] = ok_status_frame();
    frames[1] = message_frame(too_long, 10);
    ev = stream(&c, call, frames, 2);
    CHECK(ev && !ev->result.ok && strcmp(ev->result.code, "PROTOCOL") == 0 && ev->nmsgs == 0);
    CHECK(ev && strstr(ev->result.msg, "message_id_too_long") != NULL);
    CHECK(c.consumer.leases.count == 0);
    mql_event_free(ev);
    fixture_client_finish(&c, call);
    free(too_long);
    free(longest);
    free(past);
    free(handle);
}

/* "The first message is always taken" (api.md, max_bytes) is what lets a body
 * larger than the budget through at all. A corrupted message counts toward
 * the batch, and it counted as a message taken for the byte bound too: a
 * large body that came right after a corrupted one was given back
 * (over_bytes) although the host had been handed nothing, and a FIFO queue
 * (the broker delivers again from the first message it did not get an ack
 * for) brought the same two back, in the same order, every time. */
static void a_corrupted_message_does_not_use_up_the_first_place(void) {
    mql_client c;
    mql_call *call;
    mql_event *ev;
    grpc_byte_buffer *frames[3];
    fixture_client_init(&c);
    mql_client_receive(&c, 16, 5000, 50);
    call = c.calls;
    CHECK(call != NULL);
    if (!call) return;
    frames[0] = ok_status_frame();
    frames[1] = message_frame_digest("BAD", "0 1700000000000 30000 0 0 broker-a 0 0 0", 10, "1");
    frames[2] = message_frame("BIG", 100);
    ev = stream(&c, call, frames, 3);
    CHECK(reason_count(&c.metrics.corrupted, "digest_mismatch") == 1);
    CHECK(ev && ev->result.ok && ev->nmsgs == 1);
    CHECK(ev && ev->nmsgs == 1 && strcmp(ev->msgs[0].id, "BIG") == 0);
    CHECK(reason_count(&c.metrics.given_back, "over_bytes") == 0);
    mql_event_free(ev);
    fixture_client_finish(&c, call);
}

/* The receipt handle carries the broker's own word on how long it hides the
 * message: its third field, invisibleTime (org.apache.rocketmq.common.consumer.
 * ReceiptHandle: the message is visible again at retrieveTime + invisibleTime).
 * The lease counted the duration the receive had asked for instead: a broker
 * that hid it for less (10 s of an asked 30 s) gave it to another consumer
 * while the lease still thought it had 20 s left, its first renewal not even
 * due yet. */
static void the_handle_s_invisible_time_bounds_the_first_deadline(void) {
    mql_client c;
    mql_call *call;
    mql_event *ev;
    mql_lease *l;
    grpc_byte_buffer *frames[3];
    int64_t after;
    fixture_client_init(&c);
    mql_client_receive(&c, 4, 5000, 0);
    call = c.calls;
    CHECK(call != NULL);
    if (!call) return;
    frames[0] = ok_status_frame();
    frames[1] = message_frame_with("SHORT", "0 1700000000000 10000 0 0 broker-a 0 0 0", 10);
    frames[2] = message_frame_with("LONG", "0 1700000000000 90000 0 0 broker-a 0 0 0", 10);
    ev = stream(&c, call, frames, 3);
    after = mql_now_ms();
    CHECK(ev && ev->result.ok && ev->nmsgs == 2);
    l = lease_of(&c, "SHORT");
    CHECK(l != NULL);
    if (l) {
        CHECK(l->deadline_ms <= after + 10000);
        CHECK(l->timer_ms <= l->deadline_ms);
    }
    /* a longer one than asked is not believed: renewals ask for ours anyway */
    l = lease_of(&c, "LONG");
    CHECK(l && l->deadline_ms <= after + 30000);
    mql_event_free(ev);
    fixture_client_finish(&c, call);
}

/* An orderly group's queue is handed out in order (RocketMQ's FIFO pop: the
 * next message of a queue only after the one before it is acked or given
 * up). A corrupted message never reaches the host: it is dead-lettered or
 * nacked from the core, and a nack (on_corrupt = "nack", or a dead letter
 * that fails) brings it back later -- after the messages behind it in its
 * stream, which were handed over and run. On a FIFO consumer the rest of such
 * a stream goes back at once, as past a bound, and comes again behind it; so
 * does the rest behind a malformed message (no lease: back at its deadline). */
static void a_fifo_stream_behind_a_bad_message_goes_back(void) {
    mql_client c;
    mql_call *call;
    mql_event *ev;
    grpc_byte_buffer *frames[5];
    const char *handle = "0 1700000000000 30000 0 0 broker-a 0 0 0";
    fixture_client_init(&c);
    c.consumer.fifo = 1;
    mql_client_receive(&c, 16, 5000, 0);
    call = c.calls;
    CHECK(call != NULL);
    if (!call) return;
    frames[0] = ok_status_frame();
    frames[1] = message_frame("M1", 10);
    frames[2] = message_frame_digest("BAD", handle, 10, "1");
    frames[3] = message_frame("M3", 10);
    frames[4] = message_frame_digest("BAD2", handle, 10, "1");   /* back too, judged in its place */
    ev = stream(&c, call, frames, 5);
    CHECK(ev && ev->result.ok && ev->nmsgs == 1);
    CHECK(ev && ev->nmsgs == 1 && strcmp(ev->msgs[0].id, "M1") == 0);
    CHECK(reason_count(&c.metrics.corrupted, "digest_mismatch") == 1);
    CHECK(reason_count(&c.metrics.given_back, "behind_corrupted") == 2);
    mql_event_free(ev);
    fixture_client_finish(&c, call);

    /* the same behind a malformed frame (here: no receipt handle) */
    fixture_client_init(&c);
    c.consumer.fifo = 1;
    mql_client_receive(&c, 16, 5000, 0);
    call = c.calls;
    if (!call) return;
    frames[0] = ok_status_frame();
    frames[1] = message_frame_with("NOHANDLE", NULL, 10);
    frames[2] = message_frame("M2", 10);
    ev = stream(&c, call, frames, 3);
    CHECK(ev && ev->nmsgs == 0);
    CHECK(reason_count(&c.metrics.given_back, "behind_malformed") == 1);
    mql_event_free(ev);
    fixture_client_finish(&c, call);

    /* a consumer of a group that is not orderly takes the rest as before */
    fixture_client_init(&c);
    mql_client_receive(&c, 16, 5000, 0);
    call = c.calls;
    if (!call) return;
    frames[0] = ok_status_frame();
    frames[1] = message_frame_digest("BAD", handle, 10, "1");
    frames[2] = message_frame("M2", 10);
    ev = stream(&c, call, frames, 3);
    CHECK(ev && ev->nmsgs == 1 && strcmp(ev->msgs[0].id, "M2") == 0);
    mql_event_free(ev);
    fixture_client_finish(&c, call);
}

int main(void) {
    RUN(a_stream_with_more_messages_than_the_batch_is_cut);
    RUN(a_receive_stops_taking_at_its_byte_budget);
    RUN(receives_take_turns_naming_the_route_brokers);
    RUN(a_later_status_never_hides_an_error);
    RUN(a_message_id_too_long_costs_only_its_own_message);
    RUN(a_corrupted_message_does_not_use_up_the_first_place);
    RUN(the_handle_s_invisible_time_bounds_the_first_deadline);
    RUN(a_fifo_stream_behind_a_bad_message_goes_back);
    return TEST_REPORT("receive_caps_test");
}
