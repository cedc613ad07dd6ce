/* dv_server.c -- the dev broker's calls on the grpc core server API.
 *
 * One thread waits on the completion queue with a 20 ms deadline; between
 * events it answers long polls that can now be served, delayed answers that
 * are due, and expiries. Each call is a small state machine: request read ->
 * handled -> replies sent one by one -> status -> (client closed) -> freed.
 * Replies of a server stream (ReceiveMessage) and of the Telemetry bidi
 * stream go through the same per-call send queue.
 */
#include "dv_server.h"

#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dv_store.h"
#include "dv_wire.h"
#include "mql.h"
#include "mql_codec.h"

#define PFX "/apache.rocketmq.v2.MessagingService/"
#define MAX_BODY (4 * 1024 * 1024)

typedef enum method {
    M_UNKNOWN = 0, M_ROUTE, M_HEARTBEAT, M_SEND, M_RECEIVE, M_ACK, M_TELEMETRY, M_TERMINATE, M_CHANGE
} method;

static const struct { const char *path; method m; } methods[] = {
    {PFX "QueryRoute", M_ROUTE},       {PFX "Heartbeat", M_HEARTBEAT},
    {PFX "SendMessage", M_SEND},       {PFX "ReceiveMessage", M_RECEIVE},
    {PFX "AckMessage", M_ACK},         {PFX "Telemetry", M_TELEMETRY},
    {PFX "NotifyClientTermination", M_TERMINATE},
    {PFX "ChangeInvisibleDuration", M_CHANGE},
};

typedef struct dv_call dv_call;
typedef struct tag { dv_call *c; int what; } tag;
enum { T_NEW = 1, T_RECV, T_SEND, T_STATUS, T_CLOSE };

struct dv_call {
    dv_server *srv;
    grpc_call *call;
    grpc_call_details details;
    grpc_metadata_array md;
    method m;
    char client_id[192];
    grpc_byte_buffer *req;
    grpc_byte_buffer **out;     /* replies waiting to be sent, in order */
    size_t nout, iout, capout;
    int md_sent, sending, finishing, status_sent, closed, cancelled, in_flight;
    int listed;                 /* on the waiting list: a call is listed at most once */
    grpc_status_code status;
    int64_t poll_until;         /* receive: wall ms when the long poll ends */
    int64_t answer_at;          /* delayed answer: wall ms */
    Apache__Rocketmq__V2__ReceiveMessageRequest *rx;
    tag t_new, t_recv, t_send, t_status, t_close;
    dv_call *next;              /* on the waiting list (long poll, delay, pause) */
};

typedef struct client_reg { char *id; int consumer; } client_reg;

struct dv_server {
    grpc_server *server;
    grpc_completion_queue *cq;
    dv_store store;
    pthread_mutex_t mu;         /* guards faults, topics added from outside, stats */
    dv_faults faults;
    client_reg *clients;
    size_t nclients;
    dv_call *waiting;
    int port;
    unsigned int seed;
    uint64_t served, changes, acks, sent, received;
    dv_wire_stats wire;
};

/* ------------------------------------------------------------ helpers */

static int64_t wall_ms(void) { return mql_wall_ms(); }

static void set_status(Apache__Rocketmq__V2__Status *st, int code, const char *msg) {
    apache__rocketmq__v2__status__init(st);
    st->code = code;
    st->message = (char *)msg;
}

static int chance(dv_server *s, double p) {
    return p > 0 && (double)rand_r(&s->seed) / RAND_MAX < p;
}

static void queue_reply(dv_call *c, const ProtobufCMessage *msg) {
    if (c->nout == c->capout) {
        c->capout = c->capout ? c->capout * 2 : 4;
        c->out = realloc(c->out, c->capout * sizeof(*c->out));
        if (!c->out) abort();
    }
    c->out[c->nout++] = mql_pack(msg);
}

static void call_free(dv_call *c) {
    size_t i;
    if (c->call) grpc_call_unref(c->call);
    grpc_call_details_destroy(&c->details);
    grpc_metadata_array_destroy(&c->md);
    if (c->req) grpc_byte_buffer_destroy(c->req);
    for (i = c->iout; i < c->nout; i++) grpc_byte_buffer_destroy(c->out[i]);
    free(c->out);
    if (c->rx) protobuf_c_message_free_unpacked(&c->rx->base, NULL);
    free(c);
}

static void start(dv_call *c, grpc_op *ops, size_t n, tag *t) {
    if (grpc_call_start_batch(c->call, ops, n, t, NULL) == GRPC_CALL_OK) c->in_flight++;
}

/* Sends the next queued reply, or the status once everything went out; the
 * initial metadata rides with whichever goes first. */
static void pump(dv_call *c) {
    grpc_op ops[2];
    size_t n = 0;
    if (c->sending || c->status_sent) return;
    memset(ops, 0, sizeof(ops));
    if (!c->md_sent && (c->iout < c->nout || c->finishing)) {
        ops[n].op = GRPC_OP_SEND_INITIAL_METADATA;
        ops[n++].data.send_initial_metadata.count = 0;
        c->md_sent = 1;
    }
    if (c->iout < c->nout && !c->cancelled) {
        ops[n].op = GRPC_OP_SEND_MESSAGE;
        ops[n++].data.send_message.send_message = c->out[c->iout];
        c->sending = 1;
        start(c, ops, n, &c->t_send);
    } else if (c->finishing) {
        ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
        ops[n].data.send_status_from_server.status = c->status;
        ops[n++].data.send_status_from_server.trailing_metadata_count = 0;
        c->status_sent = 1;
        start(c, ops, n, &c->t_status);
    }
}

static void finish(dv_call *c, grpc_status_code status) {
    c->finishing = 1;
    c->status = status;
    pump(c);
}

static void recv_next(dv_call *c) {
    grpc_op op;
    memset(&op, 0, sizeof(op));
    op.op = GRPC_OP_RECV_MESSAGE;
    op.data.recv_message.recv_message = &c->req;
    start(c, &op, 1, &c->t_recv);
}

static void client_register(dv_server *s, const char *id, int consumer) {
    size_t i;
    for (i = 0; i < s->nclients; i++)
        if (strcmp(s->clients[i].id, id) == 0) return;
    s->clients = realloc(s->clients, (s->nclients + 1) * sizeof(*s->clients));
    if (!s->clients) abort();
    s->clients[s->nclients].id = mql_strdup(id);
    s->clients[s->nclients].consumer = consumer;
    s->nclients++;
}

static int client_known(dv_server *s, const char *id) {
    size_t i;
    for (i = 0; i < s->nclients; i++)
        if (strcmp(s->clients[i].id, id) == 0) return 1;
    return 0;
}

static void client_forget(dv_server *s, const char *id) {
    size_t i;
    for (i = 0; i < s->nclients; i++) {
        if (strcmp(s->clients[i].id, id) == 0) {
            free(s->clients[i].id);
            s->clients[i] = s->clients[--s->nclients];
            return;
        }
    }
}

/* ------------------------------------------------------------ handlers */

typedef Apache__Rocketmq__V2__Status pb_status;

static void on_route(dv_server *s, dv_call *c) {
    Apache__Rocketmq__V2__QueryRouteRequest *req = (void *)mql_unpack(
        &apache__rocketmq__v2__query_route_request__descriptor, c->req);
    Apache__Rocketmq__V2__QueryRouteResponse resp = APACHE__ROCKETMQ__V2__QUERY_ROUTE_RESPONSE__INIT;
    Apache__Rocketmq__V2__MessageQueue mq[4], *mqs[4];
    Apache__Rocketmq__V2__Broker broker = APACHE__ROCKETMQ__V2__BROKER__INIT;
    Apache__Rocketmq__V2__Endpoints ep = APACHE__ROCKETMQ__V2__ENDPOINTS__INIT;
    Apache__Rocketmq__V2__Address addr = APACHE__ROCKETMQ__V2__ADDRESS__INIT, *addrs[1] = {&addr};
    Apache__Rocketmq__V2__MessageType types[1] = {APACHE__ROCKETMQ__V2__MESSAGE_TYPE__NORMAL};
    pb_status st;
    const char *name = req && req->topic ? req->topic->name : "";
    int i;
    if (!req || !dv_topic_find(&s->store, name)) {
        set_status(&st, APACHE__ROCKETMQ__V2__CODE__TOPIC_NOT_FOUND, "topic not found (dev broker)");
    } else {
        set_status(&st, APACHE__ROCKETMQ__V2__CODE__OK, "OK");
        addr.host = "127.0.0.1";
        addr.port = s->port;
        ep.scheme = APACHE__ROCKETMQ__V2__ADDRESS_SCHEME__IPv4;
        ep.n_addresses = 1;
        ep.addresses = addrs;
        broker.name = "devbroker";
        broker.endpoints = &ep;
        for (i = 0; i < 4; i++) {
            apache__rocketmq__v2__message_queue__init(&mq[i]);
            mq[i].topic = req->topic;
            mq[i].id = i;
            mq[i].permission = APACHE__ROCKETMQ__V2__PERMISSION__READ_WRITE;
            mq[i].broker = &broker;
            mq[i].n_accept_message_types = 1;
            mq[i].accept_message_types = types;
            mqs[i] = &mq[i];
        }
        resp.n_message_queues = 4;
        resp.message_queues = mqs;
    }
    resp.status = &st;
    queue_reply(c, &resp.base);
    if (req) protobuf_c_message_free_unpacked(&req->base, NULL);
    finish(c, GRPC_STATUS_OK);
}

static void on_heartbeat(dv_server *s, dv_call *c) {
    Apache__Rocketmq__V2__HeartbeatResponse resp = APACHE__ROCKETMQ__V2__HEARTBEAT_RESPONSE__INIT;
    pb_status st;
    if (client_known(s, c->client_id)) set_status(&st, APACHE__ROCKETMQ__V2__CODE__OK, "OK");
    else set_status(&st, APACHE__ROCKETMQ__V2__CODE__UNRECOGNIZED_CLIENT_TYPE,
                    "cannot find client settings for this client");
    resp.status = &st;
    queue_reply(c, &resp.base);
    finish(c, GRPC_STATUS_OK);
}

static void on_terminate(dv_server *s, dv_call *c) {
    Apache__Rocketmq__V2__NotifyClientTerminationResponse resp =
        APACHE__ROCKETMQ__V2__NOTIFY_CLIENT_TERMINATION_RESPONSE__INIT;
    pb_status st;
    client_forget(s, c->client_id);
    set_status(&st, APACHE__ROCKETMQ__V2__CODE__OK, "OK");
    resp.status = &st;
    queue_reply(c, &resp.base);
    finish(c, GRPC_STATUS_OK);
}

static void on_send(dv_server *s, dv_call *c) {
    Apache__Rocketmq__V2__SendMessageRequest *req = (void *)mql_unpack(
        &apache__rocketmq__v2__send_message_request__descriptor, c->req);
    Apache__Rocketmq__V2__SendMessageResponse resp = APACHE__ROCKETMQ__V2__SEND_MESSAGE_RESPONSE__INIT;
    Apache__Rocketmq__V2__SendResultEntry entry = APACHE__ROCKETMQ__V2__SEND_RESULT_ENTRY__INIT,
                                          *entries[1] = {&entry};
    pb_status st;
    const Apache__Rocketmq__V2__Message *m = req && req->n_messages ? req->messages[0] : NULL;
    const Apache__Rocketmq__V2__SystemProperties *sp = m ? m->system_properties : NULL;
    dv_topic *t = m && m->topic ? dv_topic_find(&s->store, m->topic->name) : NULL;
    if (!m) set_status(&st, APACHE__ROCKETMQ__V2__CODE__MESSAGE_CORRUPTED, "no message to send");
    else if (!t) set_status(&st, APACHE__ROCKETMQ__V2__CODE__TOPIC_NOT_FOUND, "topic not found (dev broker)");
    else if (m->body.len > MAX_BODY)
        set_status(&st, APACHE__ROCKETMQ__V2__CODE__MESSAGE_BODY_TOO_LARGE,
                   "message body cannot exceed the max 4194304");
    else if (!sp || !sp->message_id || !*sp->message_id)
        set_status(&st, APACHE__ROCKETMQ__V2__CODE__ILLEGAL_MESSAGE_ID, "message id cannot be empty");
    else if (sp->tag && strchr(sp->tag, '|'))
        set_status(&st, APACHE__ROCKETMQ__V2__CODE__ILLEGAL_MESSAGE_TAG, "tag cannot contain '|'");
    else {
        size_t i = dv_topic_append(t, m, sp->message_id, wall_ms());
        set_status(&st, APACHE__ROCKETMQ__V2__CODE__OK, "OK");
        entry.status = &st;
        entry.message_id = sp->message_id;
        entry.offset = t->msgs[i].offset;
        resp.n_entries = 1;
        resp.entries = entries;
        s->sent++;
    }
    resp.status = &st;
    queue_reply(c, &resp.base);
    if (req) protobuf_c_message_free_unpacked(&req->base, NULL);
    finish(c, GRPC_STATUS_OK);
}

/* Queues one delivered message as the proxy writes it, with the wire cases
 * the faults ask for (dv_wire.c); the bytes go out as they are, so a frame
 * cut short reaches the client as it would from a broken proxy. */
static void queue_delivery(dv_server *s, dv_call *c, dv_topic *t, const char *group, size_t index) {
    dv_message *dm = &t->msgs[index];
    dv_view *v = dv_view_of(t, group, index);
    char handle[128], host[32];
    dv_delivery d;
    size_t len;
    uint8_t *bytes;
    grpc_slice slice;
    dv_handle_format(handle, sizeof(handle), &s->store, t, group, index);
    snprintf(host, sizeof(host), "127.0.0.1:%d", s->port);
    d.wire = dm->wire;
    d.wire_len = dm->wire_len;
    d.handle = handle;
    d.store_host = host;
    d.store_ms = dm->store_ms;
    d.attempts = v->attempts;
    d.queue_id = dm->queue_id;
    d.offset = dm->offset;
    bytes = dv_wire_delivery(&d, &s->faults, &s->seed, &len, &s->wire);
    if (!bytes) return;
    if (c->nout == c->capout) {
        c->capout = c->capout ? c->capout * 2 : 4;
        c->out = realloc(c->out, c->capout * sizeof(*c->out));
        if (!c->out) abort();
    }
    slice = grpc_slice_from_copied_buffer((const char *)bytes, len);
    c->out[c->nout++] = grpc_raw_byte_buffer_create(&slice, 1);
    grpc_slice_unref(slice);
    free(bytes);
}

static void queue_status_and_stamp(dv_call *c, int code, const char *msg) {
    Apache__Rocketmq__V2__ReceiveMessageResponse r1 = APACHE__ROCKETMQ__V2__RECEIVE_MESSAGE_RESPONSE__INIT;
    Apache__Rocketmq__V2__ReceiveMessageResponse r2 = APACHE__ROCKETMQ__V2__RECEIVE_MESSAGE_RESPONSE__INIT;
    Google__Protobuf__Timestamp now = GOOGLE__PROTOBUF__TIMESTAMP__INIT;
    pb_status st;
    int64_t ms = wall_ms();
    set_status(&st, code, msg);
    r1.content_case = APACHE__ROCKETMQ__V2__RECEIVE_MESSAGE_RESPONSE__CONTENT_STATUS;
    r1.status = &st;
    now.seconds = ms / 1000;
    now.nanos = (int32_t)(ms % 1000) * 1000000;
    r2.content_case = APACHE__ROCKETMQ__V2__RECEIVE_MESSAGE_RESPONSE__CONTENT_DELIVERY_TIMESTAMP;
    r2.delivery_timestamp = &now;
    queue_reply(c, &r1.base);
    if (code == APACHE__ROCKETMQ__V2__CODE__OK) return;   /* messages go between */
    queue_reply(c, &r2.base);
}

/* Tries to answer a long poll; returns 1 when the call is answered. */
static int try_receive(dv_server *s, dv_call *c, int64_t now) {
    Apache__Rocketmq__V2__ReceiveMessageRequest *rx = c->rx;
    Apache__Rocketmq__V2__ReceiveMessageResponse r2 = APACHE__ROCKETMQ__V2__RECEIVE_MESSAGE_RESPONSE__INIT;
    Google__Protobuf__Timestamp stamp = GOOGLE__PROTOBUF__TIMESTAMP__INIT;
    dv_topic *t = dv_topic_find(&s->store, rx->message_queue->topic->name);
    size_t idx[32], n, i, batch = rx->batch_size > 0 ? (size_t)rx->batch_size : 1;
    int64_t invisible = mql_duration_ms(rx->invisible_duration->seconds, rx->invisible_duration->nanos);
    if (batch > 32) batch = 32;
    n = dv_pop(&s->store, t, rx->group->name,
               rx->filter_expression ? rx->filter_expression->expression : "*", batch,
               (int64_t)((double)invisible * s->faults.time_scale), now, idx);
    if (n == 0) {
        if (now < c->poll_until) return 0;
        queue_status_and_stamp(c, APACHE__ROCKETMQ__V2__CODE__MESSAGE_NOT_FOUND, "no new message");
        finish(c, GRPC_STATUS_OK);
        return 1;
    }
    queue_status_and_stamp(c, APACHE__ROCKETMQ__V2__CODE__OK, "OK");
    for (i = 0; i < n; i++) queue_delivery(s, c, t, rx->group->name, idx[i]);
    stamp.seconds = now / 1000;
    stamp.nanos = (int32_t)(now % 1000) * 1000000;
    r2.content_case = APACHE__ROCKETMQ__V2__RECEIVE_MESSAGE_RESPONSE__CONTENT_DELIVERY_TIMESTAMP;
    r2.delivery_timestamp = &stamp;
    queue_reply(c, &r2.base);
    s->received += n;
    finish(c, GRPC_STATUS_OK);
    return 1;
}

static void wait_list_add(dv_server *s, dv_call *c) {
    if (c->listed) return;
    c->listed = 1;
    c->next = s->waiting;
    s->waiting = c;
}

static void wait_list_remove(dv_server *s, dv_call *c) {
    dv_call **pp = &s->waiting;
    if (!c->listed) return;
    while (*pp && *pp != c) pp = &(*pp)->next;
    if (*pp) *pp = c->next;
    c->listed = 0;
}

static void on_receive(dv_server *s, dv_call *c) {
    Apache__Rocketmq__V2__ReceiveMessageRequest *rx = (void *)mql_unpack(
        &apache__rocketmq__v2__receive_message_request__descriptor, c->req);
    int64_t now = wall_ms(), poll, deadline, invisible;
    gpr_timespec d = gpr_convert_clock_type(c->details.deadline, GPR_CLOCK_REALTIME);
    const char *err = NULL;
    int code = 0;
    c->rx = rx;
    if (!rx || !rx->group || !rx->message_queue || !rx->message_queue->topic) {
        code = APACHE__ROCKETMQ__V2__CODE__BAD_REQUEST;
        err = "malformed request";
    } else if (!client_known(s, c->client_id)) {
        code = APACHE__ROCKETMQ__V2__CODE__INTERNAL_SERVER_ERROR;   /* the 5.x proxy's NPE */
        err = "no client settings for this client id (send Telemetry settings first)";
    } else if (!dv_topic_find(&s->store, rx->message_queue->topic->name)) {
        code = APACHE__ROCKETMQ__V2__CODE__TOPIC_NOT_FOUND;
        err = "topic not found (dev broker)";
    } else if (!rx->invisible_duration ||
               (invisible = mql_duration_ms(rx->invisible_duration->seconds,
                                            rx->invisible_duration->nanos)) < s->faults.min_invisible_ms) {
        code = APACHE__ROCKETMQ__V2__CODE__ILLEGAL_INVISIBLE_TIME;
        err = "the invisibleTime is too small. min is 10000";
    } else if (invisible > 43200000) {
        code = APACHE__ROCKETMQ__V2__CODE__ILLEGAL_INVISIBLE_TIME;
        err = "the invisibleTime is too large. max is 43200000";
    }
    if (err) {
        queue_status_and_stamp(c, code, err);
        finish(c, GRPC_STATUS_OK);
        return;
    }
    poll = rx->long_polling_timeout
               ? mql_duration_ms(rx->long_polling_timeout->seconds, rx->long_polling_timeout->nanos)
               : 20000;
    if (poll < 5000) poll = 5000;   /* the proxy's clamp: [5 s, 20 s] */
    if (poll > 20000) poll = 20000;
    deadline = gpr_time_cmp(d, gpr_inf_future(GPR_CLOCK_REALTIME)) == 0
                   ? now + poll
                   : mql_add_ms(mql_timestamp_ms(d.tv_sec, d.tv_nsec), -300);
    c->poll_until = now + poll < deadline ? now + poll : deadline;
    if (!try_receive(s, c, now)) wait_list_add(s, c);
}

static void on_ack(dv_server *s, dv_call *c) {
    Apache__Rocketmq__V2__AckMessageRequest *req = (void *)mql_unpack(
        &apache__rocketmq__v2__ack_message_request__descriptor, c->req);
    Apache__Rocketmq__V2__AckMessageResponse resp = APACHE__ROCKETMQ__V2__ACK_MESSAGE_RESPONSE__INIT;
    Apache__Rocketmq__V2__AckMessageResultEntry *entries = NULL, **ptrs = NULL;
    pb_status *sts = NULL, top;
    size_t i, n = req ? req->n_entries : 0;
    int code = 0, mixed = 0;
    int64_t now = wall_ms();
    entries = mql_xcalloc(n, sizeof(*entries));
    ptrs = mql_xcalloc(n, sizeof(*ptrs));
    sts = mql_xcalloc(n, sizeof(*sts));
    for (i = 0; i < n; i++) {
        const char *h = req->entries[i]->receipt_handle;
        int faulty = chance(s, s->faults.fail_ack);
        dv_handle_result r = faulty ? DV_HANDLE_OK : dv_ack(&s->store, h, now);
        apache__rocketmq__v2__ack_message_result_entry__init(&entries[i]);
        entries[i].message_id = req->entries[i]->message_id;
        entries[i].receipt_handle = req->entries[i]->receipt_handle;
        if (faulty)
            set_status(&sts[i], APACHE__ROCKETMQ__V2__CODE__INTERNAL_SERVER_ERROR,
                       "ack failed (dev broker fault)");
        else if (r == DV_HANDLE_OK || r == DV_HANDLE_SUPERSEDED)
            set_status(&sts[i], APACHE__ROCKETMQ__V2__CODE__OK, "OK");
        else
            set_status(&sts[i], APACHE__ROCKETMQ__V2__CODE__INVALID_RECEIPT_HANDLE,
                       r == DV_HANDLE_EXPIRED ? "receipt handle is expired" : "receipt handle is malformed");
        entries[i].status = &sts[i];
        ptrs[i] = &entries[i];
        if (i == 0) code = sts[i].code;
        else if (code != (int)sts[i].code) mixed = 1;
        s->acks++;
    }
    if (n == 0) set_status(&top, APACHE__ROCKETMQ__V2__CODE__BAD_REQUEST, "no entries");
    else if (mixed) set_status(&top, APACHE__ROCKETMQ__V2__CODE__MULTIPLE_RESULTS, "MULTIPLE_RESULTS");
    else set_status(&top, code, sts[0].message);
    resp.status = &top;
    resp.n_entries = n;
    resp.entries = ptrs;
    queue_reply(c, &resp.base);
    free(entries);
    free(ptrs);
    free(sts);
    if (req) protobuf_c_message_free_unpacked(&req->base, NULL);
    finish(c, GRPC_STATUS_OK);
}

static void on_change(dv_server *s, dv_call *c) {
    Apache__Rocketmq__V2__ChangeInvisibleDurationRequest *req = (void *)mql_unpack(
        &apache__rocketmq__v2__change_invisible_duration_request__descriptor, c->req);
    Apache__Rocketmq__V2__ChangeInvisibleDurationResponse resp =
        APACHE__ROCKETMQ__V2__CHANGE_INVISIBLE_DURATION_RESPONSE__INIT;
    pb_status st;
    char handle[128];
    int capped = 0;
    int64_t d = req && req->invisible_duration
                    ? mql_duration_ms(req->invisible_duration->seconds, req->invisible_duration->nanos)
                    : -1;
    s->changes++;
    if (!req || !req->receipt_handle) {
        set_status(&st, APACHE__ROCKETMQ__V2__CODE__BAD_REQUEST, "malformed request");
    } else if (d < 0 || d > 43200000) {
        set_status(&st, APACHE__ROCKETMQ__V2__CODE__ILLEGAL_INVISIBLE_TIME, "the invisibleTime is out of range");
    } else if (chance(s, s->faults.fail_change)) {
        set_status(&st, APACHE__ROCKETMQ__V2__CODE__INTERNAL_SERVER_ERROR,
                   "changeInvisibleDuration failed (dev broker fault)");
    } else {
        dv_handle_result r = dv_change(&s->store, req->receipt_handle,
                                       (int64_t)((double)d * s->faults.time_scale), wall_ms(),
                                       s->faults.max_renewals, &capped, handle, sizeof(handle));
        if (capped)
            set_status(&st, APACHE__ROCKETMQ__V2__CODE__INTERNAL_SERVER_ERROR,
                       "renewal cap reached (dev broker fault)");
        else if (r == DV_HANDLE_OK) {
            set_status(&st, APACHE__ROCKETMQ__V2__CODE__OK, "OK");
            resp.receipt_handle = handle;
        } else if (r == DV_HANDLE_SUPERSEDED) {
            /* the real proxy answers OK (and arms a second deadline); we answer OK, change nothing */
            set_status(&st, APACHE__ROCKETMQ__V2__CODE__OK, "OK");
            resp.receipt_handle = req->receipt_handle;
        } else {
            set_status(&st, APACHE__ROCKETMQ__V2__CODE__INVALID_RECEIPT_HANDLE,
                       r == DV_HANDLE_EXPIRED ? "receipt handle is expired" : "receipt handle is malformed");
        }
    }
    resp.status = &st;
    queue_reply(c, &resp.base);
    if (req) protobuf_c_message_free_unpacked(&req->base, NULL);
    if (s->faults.delay_change_ms > 0) {
        c->answer_at = mql_add_ms(wall_ms(), s->faults.delay_change_ms);
        wait_list_add(s, c);
        return;
    }
    finish(c, GRPC_STATUS_OK);
}

/* Telemetry: answer each Settings with the merged settings, as the proxy does. */
static void on_telemetry(dv_server *s, dv_call *c) {
    Apache__Rocketmq__V2__TelemetryCommand *cmd = (void *)mql_unpack(
        &apache__rocketmq__v2__telemetry_command__descriptor, c->req);
    Apache__Rocketmq__V2__TelemetryCommand out = APACHE__ROCKETMQ__V2__TELEMETRY_COMMAND__INIT;
    Apache__Rocketmq__V2__RetryPolicy retry = APACHE__ROCKETMQ__V2__RETRY_POLICY__INIT;
    Apache__Rocketmq__V2__ExponentialBackoff exp = APACHE__ROCKETMQ__V2__EXPONENTIAL_BACKOFF__INIT;
    Google__Protobuf__Duration b1 = GOOGLE__PROTOBUF__DURATION__INIT, b2 = GOOGLE__PROTOBUF__DURATION__INIT,
                               poll = GOOGLE__PROTOBUF__DURATION__INIT;
    pb_status st;
    grpc_byte_buffer *req = c->req;
    c->req = NULL;
    grpc_byte_buffer_destroy(req);
    if (cmd && cmd->command_case == APACHE__ROCKETMQ__V2__TELEMETRY_COMMAND__COMMAND_SETTINGS &&
        cmd->settings) {
        Apache__Rocketmq__V2__Settings *set = cmd->settings;
        int consumer = set->pub_sub_case == APACHE__ROCKETMQ__V2__SETTINGS__PUB_SUB_SUBSCRIPTION;
        client_register(s, c->client_id, consumer);
        set_status(&st, APACHE__ROCKETMQ__V2__CODE__OK, "OK");
        b1.nanos = 10000000;
        b2.seconds = 1;
        exp.initial = &b1;
        exp.max = &b2;
        exp.multiplier = 2;
        retry.max_attempts = consumer ? DV_MAX_ATTEMPTS : 3;
        retry.strategy_case = APACHE__ROCKETMQ__V2__RETRY_POLICY__STRATEGY_EXPONENTIAL_BACKOFF;
        retry.exponential_backoff = &exp;
        set->backoff_policy = &retry;   /* producers require an exponential backoff */
        if (consumer && set->subscription) {
            poll.seconds = 20;
            set->subscription->receive_batch_size = 32;
            set->subscription->long_polling_timeout = &poll;
        } else if (set->publishing) {
            set->publishing->max_body_size = MAX_BODY;
            set->publishing->validate_message_type = 1;
        }
        out.status = &st;
        out.command_case = APACHE__ROCKETMQ__V2__TELEMETRY_COMMAND__COMMAND_SETTINGS;
        out.settings = set;
        queue_reply(c, &out.base);
        /* the unpacked tree must not free what lives on this stack */
        set->backoff_policy = NULL;
        if (consumer && set->subscription) set->subscription->long_polling_timeout = NULL;
        pump(c);
    }
    if (cmd) protobuf_c_message_free_unpacked(&cmd->base, NULL);
    recv_next(c);
}

static void dispatch(dv_server *s, dv_call *c) {
    s->served++;
    switch (c->m) {
    case M_ROUTE: on_route(s, c); break;
    case M_HEARTBEAT: on_heartbeat(s, c); break;
    case M_SEND: on_send(s, c); break;
    case M_RECEIVE: on_receive(s, c); break;
    case M_ACK: on_ack(s, c); break;
    case M_TELEMETRY: on_telemetry(s, c); break;
    case M_TERMINATE: on_terminate(s, c); break;
    case M_CHANGE: on_change(s, c); break;
    default: finish(c, GRPC_STATUS_UNIMPLEMENTED); break;
    }
}

/* ------------------------------------------------------------ the loop */

static void request_new(dv_server *s);

static void on_new(dv_server *s, dv_call *c) {
    grpc_op ops[1];
    size_t i;
    request_new(s);
    for (i = 0; i < sizeof(methods) / sizeof(methods[0]); i++)
        if (grpc_slice_str_cmp(c->details.method, methods[i].path) == 0) c->m = methods[i].m;
    for (i = 0; i < c->md.count; i++) {
        if (grpc_slice_str_cmp(c->md.metadata[i].key, "x-mq-client-id") == 0) {
            size_t n = GRPC_SLICE_LENGTH(c->md.metadata[i].value);
            if (n >= sizeof(c->client_id)) n = sizeof(c->client_id) - 1;
            memcpy(c->client_id, GRPC_SLICE_START_PTR(c->md.metadata[i].value), n);
            c->client_id[n] = '\0';
        }
    }
    memset(ops, 0, sizeof(ops));
    ops[0].op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    ops[0].data.recv_close_on_server.cancelled = &c->cancelled;
    start(c, &ops[0], 1, &c->t_close);
    recv_next(c);
}

static void on_recv(dv_server *s, dv_call *c) {
    if (!c->req) {   /* the client half-closed (Telemetry) or sent nothing */
        finish(c, GRPC_STATUS_OK);
        return;
    }
    if (c->m == M_TELEMETRY) {
        on_telemetry(s, c);
        return;
    }
    if (!c->client_id[0]) {
        /* as the proxy: every call needs x-mq-client-id */
        finish(c, GRPC_STATUS_OK);   /* (a unary without reply: clients treat as failure) */
        return;
    }
    if (s->faults.paused) {
        wait_list_add(s, c);
        return;
    }
    dispatch(s, c);
}

static void request_new(dv_server *s) {
    dv_call *c = mql_xcalloc(1, sizeof(*c));
    c->srv = s;
    grpc_call_details_init(&c->details);
    grpc_metadata_array_init(&c->md);
    c->t_new = (tag){c, T_NEW};
    c->t_recv = (tag){c, T_RECV};
    c->t_send = (tag){c, T_SEND};
    c->t_status = (tag){c, T_STATUS};
    c->t_close = (tag){c, T_CLOSE};
    if (grpc_server_request_call(s->server, &c->call, &c->details, &c->md, s->cq, s->cq, &c->t_new) !=
        GRPC_CALL_OK)
        call_free(c);
}

static void on_event(dv_server *s, tag *t, int success) {
    dv_call *c = t->c;
    if (t->what == T_NEW) {
        if (!success) {
            call_free(c);
            return;
        }
        on_new(s, c);
        return;
    }
    c->in_flight--;
    switch (t->what) {
    case T_RECV:
        if (success) on_recv(s, c);
        else finish(c, GRPC_STATUS_OK);
        break;
    case T_SEND:
        grpc_byte_buffer_destroy(c->out[c->iout]);
        c->out[c->iout++] = NULL;
        c->sending = 0;
        pump(c);
        break;
    case T_STATUS:
        break;
    case T_CLOSE:
        c->closed = 1;
        break;
    }
    if (c->in_flight == 0 && c->closed && (c->status_sent || c->cancelled)) {
        /* off the waiting list before freeing */
        wait_list_remove(s, c);
        call_free(c);
    }
}

/* Long polls, delayed answers, paused calls, dropped streams.
 * A call leaves the list before anything can answer or re-list it: calls
 * parked during a pause are taken off first and dispatched after the walk,
 * and a call that has its answer (finishing) is never served again. */
static void tick(dv_server *s) {
    dv_call **pp = &s->waiting, *parked = NULL;
    int64_t now = wall_ms();
    int drop = s->faults.drop_streams;
    s->faults.drop_streams = 0;
    while (*pp) {
        dv_call *c = *pp;
        int done = 0;
        if (c->cancelled || c->closed) {
            done = 1;
        } else if (s->faults.paused) {
            /* a partition: nobody gets an answer */
        } else if (c->answer_at) {
            if (now >= c->answer_at) {
                c->answer_at = 0;
                finish(c, GRPC_STATUS_OK);
                done = 1;
            }
        } else if (c->finishing) {
            done = 1;   /* answered: nothing more for it here */
        } else if (!c->rx) {
            *pp = c->next;   /* parked while paused: dispatched after the walk */
            c->listed = 0;
            c->next = parked;
            parked = c;
            continue;
        } else if (drop) {
            grpc_call_cancel_with_status(c->call, GRPC_STATUS_UNAVAILABLE,
                                         "stream dropped (dev broker fault)", NULL);
            done = 1;
        } else {
            done = try_receive(s, c, now);
        }
        if (done) {
            *pp = c->next;
            c->listed = 0;
        } else {
            pp = &c->next;
        }
    }
    while (parked) {
        dv_call *c = parked;
        parked = c->next;
        c->next = NULL;
        dispatch(s, c);   /* a long poll it cannot answer yet lists it again */
    }
}

dv_server *dv_server_new(const char *listen, int *port) {
    dv_server *s = mql_xcalloc(1, sizeof(*s));
    grpc_server_credentials *cr;
    grpc_arg arg;
    grpc_channel_args args;
    grpc_init();
    /* the proxy accepts up to 130 MiB, so that a 4 MiB+ body reaches its own check */
    arg.type = GRPC_ARG_INTEGER;
    arg.key = GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH;
    arg.value.integer = 130 * 1024 * 1024;
    args.num_args = 1;
    args.args = &arg;
    s->server = grpc_server_create(&args, NULL);
    s->cq = grpc_completion_queue_create_for_next(NULL);
    grpc_server_register_completion_queue(s->server, s->cq, NULL);
    cr = grpc_insecure_server_credentials_create();
    s->port = grpc_server_add_http2_port(s->server, listen, cr);
    grpc_server_credentials_release(cr);
    if (!s->port) {
        grpc_server_destroy(s->server);
        grpc_completion_queue_shutdown(s->cq);
        grpc_completion_queue_destroy(s->cq);
        grpc_shutdown();
        free(s);
        return NULL;
    }
    *port = s->port;
    dv_store_init(&s->store);
    pthread_mutex_init(&s->mu, NULL);
    dv_faults_init(&s->faults);
    s->seed = 12345;
    grpc_server_start(s->server);
    request_new(s);
    return s;
}

void dv_server_add_topic(dv_server *s, const char *name) {
    pthread_mutex_lock(&s->mu);
    dv_topic_create(&s->store, name);
    pthread_mutex_unlock(&s->mu);
}

void dv_server_add_topic_locked(dv_server *s, const char *name) { dv_topic_create(&s->store, name); }

int dv_server_publish_locked(dv_server *s, const char *topic, int64_t delay_ms, char *msg, size_t len) {
    dv_topic *t = dv_topic_find(&s->store, topic);
    Apache__Rocketmq__V2__Message *m;
    int64_t now = wall_ms();
    uint8_t *bytes;
    size_t n;
    char id[48];
    if (!t) {
        snprintf(msg, len, "topic not found '%.64s'", topic);
        return -1;
    }
    snprintf(id, sizeof(id), "DVPUBLISH%012llu", (unsigned long long)++s->store.next_id);
    bytes = dv_wire_full_message(topic, id, now, mql_add_ms(now, delay_ms), &n);
    m = (void *)protobuf_c_message_unpack(&apache__rocketmq__v2__message__descriptor, NULL, n, bytes);
    free(bytes);
    if (!m) abort();   /* we packed it ourselves */
    dv_topic_append(t, m, id, now);
    protobuf_c_message_free_unpacked(&m->base, NULL);
    s->sent++;
    snprintf(msg, len, "id=%s", id);
    return 0;
}

pthread_mutex_t *dv_server_lock(dv_server *s) { return &s->mu; }
dv_faults *dv_server_faults(dv_server *s) { return &s->faults; }

void dv_server_stats(dv_server *s, char *buf, size_t len) {
    snprintf(buf, len,
             "calls=%llu sent=%llu delivered=%llu acks=%llu changes=%llu topics=%zu clients=%zu"
             " gzip=%llu corrupt_digest=%llu bomb=%llu malformed=%llu truncated_frame=%llu",
             (unsigned long long)s->served, (unsigned long long)s->sent,
             (unsigned long long)s->received, (unsigned long long)s->acks,
             (unsigned long long)s->changes, s->store.ntopics, s->nclients,
             (unsigned long long)s->wire.gzip, (unsigned long long)s->wire.corrupt,
             (unsigned long long)s->wire.bomb, (unsigned long long)s->wire.malformed,
             (unsigned long long)s->wire.truncated);
}

void dv_server_run(dv_server *s, volatile int *stop) {
    while (!*stop) {
        grpc_event ev = grpc_completion_queue_next(
            s->cq, gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC), gpr_time_from_millis(20, GPR_TIMESPAN)),
            NULL);
        pthread_mutex_lock(&s->mu);
        if (ev.type == GRPC_OP_COMPLETE) on_event(s, ev.tag, ev.success);
        tick(s);
        pthread_mutex_unlock(&s->mu);
    }
}

void dv_server_free(dv_server *s) {
    grpc_event ev;
    size_t i;
    grpc_server_shutdown_and_notify(s->server, s->cq, NULL);
    grpc_server_cancel_all_calls(s->server);
    for (;;) {
        ev = grpc_completion_queue_next(s->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
        if (ev.type == GRPC_OP_COMPLETE && ev.tag == NULL) break;
        if (ev.type == GRPC_OP_COMPLETE) on_event(s, ev.tag, 0);
    }
    grpc_server_destroy(s->server);
    grpc_completion_queue_shutdown(s->cq);
    do {
        ev = grpc_completion_queue_next(s->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
        if (ev.type == GRPC_OP_COMPLETE && ev.tag) on_event(s, ev.tag, 0);
    } while (ev.type != GRPC_QUEUE_SHUTDOWN);
    grpc_completion_queue_destroy(s->cq);
    for (i = 0; i < s->nclients; i++) free(s->clients[i].id);
    free(s->clients);
    dv_store_free(&s->store);
    pthread_mutex_destroy(&s->mu);
    free(s);
    grpc_shutdown();
}
