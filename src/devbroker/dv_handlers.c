/* dv_handlers.c -- the RocketMQ v2 requests the dev broker answers, as the
 * 5.x proxy answers them: route, heartbeat, send, receive (long poll), ack,
 * change invisible duration, telemetry settings, client termination, and
 * transactions: a half message is kept aside (dv_half.h) until
 * EndTransaction or a check's answer ends it.
 * Every request is decoded here from bytes a client sent: nothing in it is
 * trusted (spec/fuzz/dv_request_fuzz.c runs these on arbitrary input). */
#include "dv_call.h"

#include <grpc/support/time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mql.h"
#include "mql_codec.h"

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
        dv_set_status(&st, APACHE__ROCKETMQ__V2__CODE__TOPIC_NOT_FOUND, "topic not found (dev broker)");
    } else {
        dv_set_status(&st, APACHE__ROCKETMQ__V2__CODE__OK, "OK");
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
    dv_reply(c, &resp.base);
    if (req) protobuf_c_message_free_unpacked(&req->base, NULL);
    dv_finish(c, GRPC_STATUS_OK);
}

static void on_heartbeat(dv_server *s, dv_call *c) {
    Apache__Rocketmq__V2__HeartbeatResponse resp = APACHE__ROCKETMQ__V2__HEARTBEAT_RESPONSE__INIT;
    pb_status st;
    if (dv_client_known(s, c->client_id)) dv_set_status(&st, APACHE__ROCKETMQ__V2__CODE__OK, "OK");
    else dv_set_status(&st, APACHE__ROCKETMQ__V2__CODE__UNRECOGNIZED_CLIENT_TYPE,
                    "cannot find client settings for this client");
    resp.status = &st;
    dv_reply(c, &resp.base);
    dv_finish(c, GRPC_STATUS_OK);
}

static void on_terminate(dv_server *s, dv_call *c) {
    Apache__Rocketmq__V2__NotifyClientTerminationResponse resp =
        APACHE__ROCKETMQ__V2__NOTIFY_CLIENT_TERMINATION_RESPONSE__INIT;
    pb_status st;
    dv_client_forget(s, c->client_id);
    dv_set_status(&st, APACHE__ROCKETMQ__V2__CODE__OK, "OK");
    resp.status = &st;
    dv_reply(c, &resp.base);
    dv_finish(c, GRPC_STATUS_OK);
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
    if (!m) dv_set_status(&st, APACHE__ROCKETMQ__V2__CODE__MESSAGE_CORRUPTED, "no message to send");
    else if (!t) dv_set_status(&st, APACHE__ROCKETMQ__V2__CODE__TOPIC_NOT_FOUND, "topic not found (dev broker)");
    else if (m->body.len > DV_MAX_BODY)
        dv_set_status(&st, APACHE__ROCKETMQ__V2__CODE__MESSAGE_BODY_TOO_LARGE,
                   "message body cannot exceed the max 4194304");
    else if (!sp || !sp->message_id || !*sp->message_id)
        dv_set_status(&st, APACHE__ROCKETMQ__V2__CODE__ILLEGAL_MESSAGE_ID, "message id cannot be empty");
    else if (sp->tag && strchr(sp->tag, '|'))
        dv_set_status(&st, APACHE__ROCKETMQ__V2__CODE__ILLEGAL_MESSAGE_TAG, "tag cannot contain '|'");
    else if (sp->message_type == APACHE__ROCKETMQ__V2__MESSAGE_TYPE__TRANSACTION) {
        /* a half message: invisible until its transaction ends */
        int64_t now = mql_wall_ms();
        const char *tx = dv_half_add(&s->halves, t->name, sp->message_id, m,
                                     mql_add_ms(now, s->faults.tx_check_ms));
        dv_set_status(&st, APACHE__ROCKETMQ__V2__CODE__OK, "OK");
        entry.status = &st;
        entry.message_id = sp->message_id;
        entry.transaction_id = (char *)tx;
        resp.n_entries = 1;
        resp.entries = entries;
        s->sent++;
    } else {
        size_t i = dv_topic_append(t, m, sp->message_id, mql_wall_ms());
        dv_set_status(&st, APACHE__ROCKETMQ__V2__CODE__OK, "OK");
        entry.status = &st;
        entry.message_id = sp->message_id;
        entry.offset = t->msgs[i].offset;
        resp.n_entries = 1;
        resp.entries = entries;
        s->sent++;
    }
    resp.status = &st;
    dv_reply(c, &resp.base);
    if (req) protobuf_c_message_free_unpacked(&req->base, NULL);
    /* sends that stay in flight while the client closes or its deadline passes */
    if (s->faults.delay_send_ms > 0) {
        c->answer_at = mql_add_ms(mql_wall_ms(), s->faults.delay_send_ms);
        dv_wait_add(s, c);
        return;
    }
    dv_finish(c, GRPC_STATUS_OK);
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
    dv_reply_raw(c, bytes, len);
    free(bytes);
}

static void queue_status_and_stamp(dv_call *c, int code, const char *msg) {
    Apache__Rocketmq__V2__ReceiveMessageResponse r1 = APACHE__ROCKETMQ__V2__RECEIVE_MESSAGE_RESPONSE__INIT;
    Apache__Rocketmq__V2__ReceiveMessageResponse r2 = APACHE__ROCKETMQ__V2__RECEIVE_MESSAGE_RESPONSE__INIT;
    Google__Protobuf__Timestamp now = GOOGLE__PROTOBUF__TIMESTAMP__INIT;
    pb_status st;
    int64_t ms = mql_wall_ms();
    dv_set_status(&st, code, msg);
    r1.content_case = APACHE__ROCKETMQ__V2__RECEIVE_MESSAGE_RESPONSE__CONTENT_STATUS;
    r1.status = &st;
    now.seconds = ms / 1000;
    now.nanos = (int32_t)(ms % 1000) * 1000000;
    r2.content_case = APACHE__ROCKETMQ__V2__RECEIVE_MESSAGE_RESPONSE__CONTENT_DELIVERY_TIMESTAMP;
    r2.delivery_timestamp = &now;
    dv_reply(c, &r1.base);
    if (code == APACHE__ROCKETMQ__V2__CODE__OK) return;   /* messages go between */
    dv_reply(c, &r2.base);
}

/* Tries to answer a long poll; returns 1 when the call is answered. */
int dv_try_receive(dv_server *s, dv_call *c, int64_t now) {
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
        dv_finish(c, GRPC_STATUS_OK);
        return 1;
    }
    queue_status_and_stamp(c, APACHE__ROCKETMQ__V2__CODE__OK, "OK");
    for (i = 0; i < n; i++) queue_delivery(s, c, t, rx->group->name, idx[i]);
    stamp.seconds = now / 1000;
    stamp.nanos = (int32_t)(now % 1000) * 1000000;
    r2.content_case = APACHE__ROCKETMQ__V2__RECEIVE_MESSAGE_RESPONSE__CONTENT_DELIVERY_TIMESTAMP;
    r2.delivery_timestamp = &stamp;
    dv_reply(c, &r2.base);
    s->received += n;
    dv_finish(c, GRPC_STATUS_OK);
    return 1;
}


static void on_receive(dv_server *s, dv_call *c) {
    Apache__Rocketmq__V2__ReceiveMessageRequest *rx = (void *)mql_unpack(
        &apache__rocketmq__v2__receive_message_request__descriptor, c->req);
    int64_t now = mql_wall_ms(), poll, deadline, invisible;
    gpr_timespec d = gpr_convert_clock_type(c->details.deadline, GPR_CLOCK_REALTIME);
    const char *err = NULL;
    int code = 0;
    c->rx = rx;
    if (!rx || !rx->group || !rx->message_queue || !rx->message_queue->topic) {
        code = APACHE__ROCKETMQ__V2__CODE__BAD_REQUEST;
        err = "malformed request";
    } else if (!dv_client_known(s, c->client_id)) {
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
        dv_finish(c, GRPC_STATUS_OK);
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
    /* an armed drop_streams takes this stream too, even with messages ready:
     * answered here, the drop waited for a receive that had to wait, which
     * under a backlog never came; the tick right after this event drops it */
    if (s->faults.drop_streams || !dv_try_receive(s, c, now)) dv_wait_add(s, c);
}

static void on_ack(dv_server *s, dv_call *c) {
    Apache__Rocketmq__V2__AckMessageRequest *req = (void *)mql_unpack(
        &apache__rocketmq__v2__ack_message_request__descriptor, c->req);
    Apache__Rocketmq__V2__AckMessageResponse resp = APACHE__ROCKETMQ__V2__ACK_MESSAGE_RESPONSE__INIT;
    Apache__Rocketmq__V2__AckMessageResultEntry *entries = NULL, **ptrs = NULL;
    pb_status *sts = NULL, top;
    size_t i, n = req ? req->n_entries : 0;
    int code = 0, mixed = 0;
    int64_t now = mql_wall_ms();
    entries = mql_xcalloc(n, sizeof(*entries));
    ptrs = mql_xcalloc(n, sizeof(*ptrs));
    sts = mql_xcalloc(n, sizeof(*sts));
    for (i = 0; i < n; i++) {
        const char *h = req->entries[i]->receipt_handle;
        int faulty = dv_chance(s, s->faults.fail_ack);
        dv_handle_result r = faulty ? DV_HANDLE_OK : dv_ack(&s->store, h, now);
        apache__rocketmq__v2__ack_message_result_entry__init(&entries[i]);
        entries[i].message_id = req->entries[i]->message_id;
        entries[i].receipt_handle = req->entries[i]->receipt_handle;
        if (faulty)
            dv_set_status(&sts[i], APACHE__ROCKETMQ__V2__CODE__INTERNAL_SERVER_ERROR,
                       "ack failed (dev broker fault)");
        else if (r == DV_HANDLE_OK || r == DV_HANDLE_SUPERSEDED)
            dv_set_status(&sts[i], APACHE__ROCKETMQ__V2__CODE__OK, "OK");
        else
            dv_set_status(&sts[i], APACHE__ROCKETMQ__V2__CODE__INVALID_RECEIPT_HANDLE,
                       r == DV_HANDLE_EXPIRED ? "receipt handle is expired" : "receipt handle is malformed");
        entries[i].status = &sts[i];
        ptrs[i] = &entries[i];
        if (i == 0) code = sts[i].code;
        else if (code != (int)sts[i].code) mixed = 1;
        s->acks++;
    }
    if (n == 0) dv_set_status(&top, APACHE__ROCKETMQ__V2__CODE__BAD_REQUEST, "no entries");
    else if (mixed) dv_set_status(&top, APACHE__ROCKETMQ__V2__CODE__MULTIPLE_RESULTS, "MULTIPLE_RESULTS");
    else dv_set_status(&top, code, sts[0].message);
    resp.status = &top;
    resp.n_entries = n;
    resp.entries = ptrs;
    dv_reply(c, &resp.base);
    free(entries);
    free(ptrs);
    free(sts);
    if (req) protobuf_c_message_free_unpacked(&req->base, NULL);
    dv_finish(c, GRPC_STATUS_OK);
}

static void on_change(dv_server *s, dv_call *c) {
    Apache__Rocketmq__V2__ChangeInvisibleDurationRequest *req = (void *)mql_unpack(
        &apache__rocketmq__v2__change_invisible_duration_request__descriptor, c->req);
    Apache__Rocketmq__V2__ChangeInvisibleDurationResponse resp =
        APACHE__ROCKETMQ__V2__CHANGE_INVISIBLE_DURATION_RESPONSE__INIT;
    pb_status st;
    char handle[128];
    int capped = 0;
    const Google__Protobuf__Duration *dur = req ? req->invisible_duration : NULL;
    /* negative: refused as the proxy does (mql_duration_ms would read it as 0) */
    int64_t d = dur && dur->seconds >= 0 && dur->nanos >= 0 ? mql_duration_ms(dur->seconds, dur->nanos) : -1;
    s->changes++;
    if (!req || !req->receipt_handle) {
        dv_set_status(&st, APACHE__ROCKETMQ__V2__CODE__BAD_REQUEST, "malformed request");
    } else if (d < 0 || d > 43200000) {
        dv_set_status(&st, APACHE__ROCKETMQ__V2__CODE__ILLEGAL_INVISIBLE_TIME, "the invisibleTime is out of range");
    } else if (dv_chance(s, s->faults.fail_change)) {
        dv_set_status(&st, APACHE__ROCKETMQ__V2__CODE__INTERNAL_SERVER_ERROR,
                   "changeInvisibleDuration failed (dev broker fault)");
    } else {
        dv_handle_result r = dv_change(&s->store, req->receipt_handle,
                                       (int64_t)((double)d * s->faults.time_scale), mql_wall_ms(),
                                       s->faults.max_renewals, &capped, handle, sizeof(handle));
        if (capped)
            dv_set_status(&st, APACHE__ROCKETMQ__V2__CODE__INTERNAL_SERVER_ERROR,
                       "renewal cap reached (dev broker fault)");
        else if (r == DV_HANDLE_OK) {
            dv_set_status(&st, APACHE__ROCKETMQ__V2__CODE__OK, "OK");
            resp.receipt_handle = handle;
        } else if (r == DV_HANDLE_SUPERSEDED) {
            /* the real proxy answers OK (and arms a second deadline); we answer OK, change nothing */
            dv_set_status(&st, APACHE__ROCKETMQ__V2__CODE__OK, "OK");
            resp.receipt_handle = req->receipt_handle;
        } else {
            dv_set_status(&st, APACHE__ROCKETMQ__V2__CODE__INVALID_RECEIPT_HANDLE,
                       r == DV_HANDLE_EXPIRED ? "receipt handle is expired" : "receipt handle is malformed");
        }
    }
    resp.status = &st;
    dv_reply(c, &resp.base);
    if (req) protobuf_c_message_free_unpacked(&req->base, NULL);
    if (s->faults.delay_change_ms > 0) {
        c->answer_at = mql_add_ms(mql_wall_ms(), s->faults.delay_change_ms);
        dv_wait_add(s, c);
        return;
    }
    dv_finish(c, GRPC_STATUS_OK);
}

/* Ends half message x: commit appends it to its topic (delivered from now
 * on), rollback drops it. */
static void end_half(dv_server *s, dv_half *x, int commit) {
    if (commit) {
        dv_topic *t = dv_topic_find(&s->store, x->topic);
        Apache__Rocketmq__V2__Message *m = (void *)protobuf_c_message_unpack(
            &apache__rocketmq__v2__message__descriptor, NULL, x->wire_len, x->wire);
        if (t && m) dv_topic_append(t, m, x->id, mql_wall_ms());
        if (m) protobuf_c_message_free_unpacked(&m->base, NULL);
        s->halves.committed++;
    } else {
        s->halves.rolled_back++;
    }
    dv_half_remove(&s->halves, x);
}

/* EndTransaction, as the proxy's EndTransactionActivity: a transaction id is
 * required; the end of one the broker no longer holds (ended before, dropped)
 * is answered OK, as the broker's one-way end is never answered at all. */
static void on_end_transaction(dv_server *s, dv_call *c) {
    Apache__Rocketmq__V2__EndTransactionRequest *req = (void *)mql_unpack(
        &apache__rocketmq__v2__end_transaction_request__descriptor, c->req);
    Apache__Rocketmq__V2__EndTransactionResponse resp = APACHE__ROCKETMQ__V2__END_TRANSACTION_RESPONSE__INIT;
    pb_status st;
    if (!req || !req->transaction_id || !*req->transaction_id) {
        dv_set_status(&st, APACHE__ROCKETMQ__V2__CODE__INVALID_TRANSACTION_ID, "transaction id cannot be empty");
    } else {
        dv_half *x = dv_half_find(&s->halves, req->transaction_id);
        dv_set_status(&st, APACHE__ROCKETMQ__V2__CODE__OK, "OK");
        if (x && dv_chance(s, s->faults.drop_end_transaction)) {
            s->halves.ends_lost++;   /* answered, never heard: the checks will ask */
        } else if (x && (req->resolution == APACHE__ROCKETMQ__V2__TRANSACTION_RESOLUTION__COMMIT ||
                         req->resolution == APACHE__ROCKETMQ__V2__TRANSACTION_RESOLUTION__ROLLBACK)) {
            end_half(s, x, req->resolution == APACHE__ROCKETMQ__V2__TRANSACTION_RESOLUTION__COMMIT);
        }
    }
    resp.status = &st;
    dv_reply(c, &resp.base);
    if (req) protobuf_c_message_free_unpacked(&req->base, NULL);
    dv_finish(c, GRPC_STATUS_OK);
}

/* Sends RecoverOrphanedTransactionCommand for x to producer stream c. */
static void send_check(dv_call *c, dv_half *x) {
    Apache__Rocketmq__V2__TelemetryCommand cmd = APACHE__ROCKETMQ__V2__TELEMETRY_COMMAND__INIT;
    Apache__Rocketmq__V2__RecoverOrphanedTransactionCommand o =
        APACHE__ROCKETMQ__V2__RECOVER_ORPHANED_TRANSACTION_COMMAND__INIT;
    Apache__Rocketmq__V2__Message *m = (void *)protobuf_c_message_unpack(
        &apache__rocketmq__v2__message__descriptor, NULL, x->wire_len, x->wire);
    if (!m) return;   /* we packed it ourselves */
    o.message = m;
    o.transaction_id = x->tx;
    cmd.command_case = APACHE__ROCKETMQ__V2__TELEMETRY_COMMAND__COMMAND_RECOVER_ORPHANED_TRANSACTION_COMMAND;
    cmd.recover_orphaned_transaction_command = &o;
    dv_reply(c, &cmd.base);
    dv_pump(c);
    protobuf_c_message_free_unpacked(&m->base, NULL);
}

void dv_check_transactions(dv_server *s, int64_t now) {
    size_t i = 0;
    while (i < s->halves.n) {
        dv_half *x = &s->halves.v[i];
        dv_call *c;
        if (now < x->check_at) {
            i++;
            continue;
        }
        if (x->checks >= s->faults.tx_check_max) {
            /* as the broker past transactionCheckMax: the half message is dropped */
            s->halves.dropped++;
            dv_half_remove(&s->halves, x);
            continue;
        }
        /* a check counts whether or not a producer was there to get it, as the broker's */
        x->checks++;
        x->check_at = mql_add_ms(now, s->faults.tx_check_interval_ms);
        c = dv_producer_for(s, x->topic);
        if (c) {
            s->halves.checks++;
            send_check(c, x);
        }
        i++;
    }
}

/* Telemetry: answer each Settings with the merged settings, as the proxy does. */
void dv_on_telemetry(dv_server *s, dv_call *c) {
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
        /* what the client sent in the fields answered from this stack: the
         * unpacked tree owns these and must get them back to free them */
        Apache__Rocketmq__V2__RetryPolicy *own_retry = set->backoff_policy;
        Google__Protobuf__Duration *own_poll =
            consumer && set->subscription ? set->subscription->long_polling_timeout : NULL;
        dv_client_register(s, c->client_id, consumer);
        dv_set_status(&st, APACHE__ROCKETMQ__V2__CODE__OK, "OK");
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
            size_t i;
            set->publishing->max_body_size = DV_MAX_BODY;
            set->publishing->validate_message_type = 1;
            /* the topics it announced: checks of their half messages come here */
            for (i = 0; i < c->npub; i++) free(c->pub_topics[i]);
            free(c->pub_topics);
            c->npub = 0;
            c->pub_topics = mql_xcalloc(set->publishing->n_topics + 1, sizeof(*c->pub_topics));
            for (i = 0; i < set->publishing->n_topics; i++)
                if (set->publishing->topics[i] && set->publishing->topics[i]->name)
                    c->pub_topics[c->npub++] = mql_strdup(set->publishing->topics[i]->name);
            dv_producer_add(s, c);
        }
        out.status = &st;
        out.command_case = APACHE__ROCKETMQ__V2__TELEMETRY_COMMAND__COMMAND_SETTINGS;
        out.settings = set;
        dv_reply(c, &out.base);
        /* the unpacked tree must not free what lives on this stack */
        set->backoff_policy = own_retry;
        if (consumer && set->subscription) set->subscription->long_polling_timeout = own_poll;
        dv_pump(c);
    }
    if (cmd) protobuf_c_message_free_unpacked(&cmd->base, NULL);
    dv_recv_next(c);
}

void dv_dispatch(dv_server *s, dv_call *c) {
    s->served++;
    switch (c->m) {
    case M_ROUTE: on_route(s, c); break;
    case M_HEARTBEAT: on_heartbeat(s, c); break;
    case M_SEND: on_send(s, c); break;
    case M_RECEIVE: on_receive(s, c); break;
    case M_ACK: on_ack(s, c); break;
    case M_TELEMETRY: dv_on_telemetry(s, c); break;
    case M_TERMINATE: on_terminate(s, c); break;
    case M_CHANGE: on_change(s, c); break;
    case M_END_TRANSACTION: on_end_transaction(s, c); break;
    default: dv_finish(c, GRPC_STATUS_UNIMPLEMENTED); break;
    }
}
