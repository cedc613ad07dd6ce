/* mql_receive.c -- where a message enters: ReceiveMessage.
 *
 * A receive is a server stream the proxy answers as: a status, then the
 * messages, then a delivery timestamp. Each message becomes a lease in the
 * table the moment it arrives (before the host sees it), with its first
 * renewal armed, so a host that is slow to pick its messages up never lets
 * one expire; its first deadline counts what the receive asked for, or the
 * shorter time its receipt handle says the broker hides it. Each frame is
 * judged first (mql_inbound.h): a corrupted message (digest or body failed)
 * is dead-lettered or nacked from here and never reaches the host; a
 * malformed frame is counted and reported as a PROTOCOL error of the
 * receive, which still returns the good messages it got. The stream's gRPC
 * deadline must outlast the long poll, and the proxy never polls for less
 * than 5 s.
 *
 * A receive takes what it asked for and no more: at most its batch, and no
 * more body bytes than the host's budget (the first message it hands over
 * always, so a large one still gets through). The first message past either
 * bound ends the taking: it and every later one of the stream are given back
 * at once (a silent nack), so the order of a FIFO group is kept and no lease
 * is held that the host did not ask for.
 *
 * Renewals first (mql_pace.h, "behind"). A receive the host asks for while
 * the renewals are behind waits, unsent, until they catch up: the fill must
 * not take the time of the renewals it made due, which with a short invisible
 * duration is lost leases. It still ends within what a receive promises, its
 * long poll (at least the proxy's 5 s) and a request timeout from the host's
 * call: caught up while a whole poll still fits (at least 5 s of its await
 * left), it goes out with the await it has left; caught up later, or still
 * behind once its long poll has passed, it is answered empty, as a poll that
 * found nothing, and the host's next receive asks afresh.
 *
 * Every function here runs with c->mu held unless it says otherwise.
 */
#include "mql_receive.h"
#include "mql_renew.h"
#include "mql_release.h"
#include "mql_session.h"
#include "mql_lite.h"

#include <stdlib.h>
#include <string.h>

#include "mql_inbound.h"

#define MIN_PROXY_POLL_MS 5000   /* grpcClientConsumerMinLongPollingTimeoutMillis */

static void on_receive_message(mql_client *c, mql_call *call, grpc_byte_buffer *reply);
static void on_receive_done(mql_client *c, mql_call *call);

static const mql_call_ops receive_ops = {.on_message = on_receive_message,
                                         .on_done = on_receive_done};

typedef struct receive_ctx {
    mql_message *msgs;
    size_t n, cap;
    mql_result status;
    int have_status;
    int64_t invisible_ms;       /* what this receive asked for: its leases' first deadline */
    int64_t start_ms;           /* when it was sent: the broker's pops all come after */
    size_t batch;               /* at most this many messages (corrupted ones included) */
    size_t taken;
    size_t max_bytes, bytes;    /* body bytes the host may take (0: no bound), taken so far */
    const char *cut;            /* a bound was reached: the reason every later message goes back */
    size_t malformed;           /* frames that were no usable message */
    const char *malformed_reason;   /* the first one's (static text) */
} receive_ctx;

/* How long the broker hides m: what the receive asked for, or less when its
 * receipt handle says so. The handle's invisibleTime is the broker's own
 * (ReceiptHandle.getNextVisibleTime: retrieveTime + invisibleTime); a proxy
 * or broker that hid it for less than asked would hand it to another
 * consumer before a lease counted from our ask renewed it. A longer one is
 * not believed: every renewal asks for ours again. */
static int64_t hidden_for_ms(const receive_ctx *rx, const mql_message *m) {
    int64_t said;
    /* (0 is no time a broker hides for: a layout read wrong, not believed) */
    if (mql_handle_invisible_ms(m->receipt_handle, &said) && said > 0 && said < rx->invisible_ms)
        return said;
    return rx->invisible_ms;
}

/* The lease starts now: from here on the message is renewed whatever the host
 * does, until it is acked, nacked or its budget is spent. */
static mql_lease *lease_begin(mql_client *c, const receive_ctx *rx, const mql_message *m) {
    mql_consumer_part *cs = &c->consumer;
    int64_t now = mql_now_ms(), pop_ms = 0, floor_ms, invisible_ms = hidden_for_ms(rx, m);
    int has_pop = mql_handle_pop_ms(m->receipt_handle, &pop_ms);
    char *key = m->lite_topic ? mql_lite_key(m->topic, m->lite_topic) : NULL;   /* mql_lite.h */
    mql_lease *l = mql_lease_add(&cs->leases, m->id, key ? key : m->topic, m->receipt_handle,
                                 now, invisible_ms);
    free(key);
    /* the broker counts from its pop, which came before this frame (mql_anchor.h) */
    l->deadline_ms = mql_anchor_deadline(&cs->anchor, rx->start_ms, now, has_pop, pop_ms,
                                         invisible_ms);
    /* A poll that took nearly the whole window leaves a bound that may be far
     * too early: keep a request's time to renew at once and let the broker's
     * answer decide, rather than give up a lease it may well still hold. */
    floor_ms = now + (invisible_ms < c->request_timeout_ms ? invisible_ms : c->request_timeout_ms);
    if (l->deadline_ms < floor_ms) l->deadline_ms = floor_ms;
    mql_lease_arm(&cs->leases, l, cs->renew ? mql_renew_next_at(c, l) : l->deadline_ms);
    return l;
}

static void keep_message(receive_ctx *rx, mql_message *m) {
    if (rx->n == rx->cap) {
        rx->cap = rx->cap ? rx->cap * 2 : 8;
        rx->msgs = realloc(rx->msgs, rx->cap * sizeof(*rx->msgs));
        if (!rx->msgs) abort();
    }
    rx->msgs[rx->n++] = *m;
    memset(m, 0, sizeof(*m));
}

/* On an orderly group's consumer, the rest of the stream behind a message the
 * host never sees goes back at once, as past a bound. RocketMQ hands a FIFO
 * queue out in order, the next message only once the one before is acked or
 * given up; a corrupted message nacked (on_corrupt = "nack", or a dead letter
 * that failed) or a malformed one (no lease: back at its deadline) comes back
 * later, and the messages behind it would have run before it. Given back,
 * they come again behind it. */
static void cut_behind(const mql_client *c, receive_ctx *rx, const char *why) {
    if (c->consumer.fifo && !rx->cut) rx->cut = why;
}

/* NULL if m may be taken, else why it goes back ("over_batch", "over_bytes",
 * or cut_behind's).
 * The byte bound spares the first message the host is handed (rx->n), not the
 * first of the stream: a corrupted one before a large body, counted in the
 * batch, must not turn the receive that lets that body through into an empty
 * one, again on every delivery of a FIFO queue. */
static const char *past_bounds(receive_ctx *rx, const mql_message *m) {
    if (rx->cut) return rx->cut;
    if (rx->taken >= rx->batch) rx->cut = "over_batch";
    else if (rx->max_bytes && rx->n > 0 && rx->bytes + m->body_len > rx->max_bytes)
        rx->cut = "over_bytes";
    return rx->cut;
}

/* How bad a status is: OK, MESSAGE_NOT_FOUND (an empty poll), an error. The
 * proxy sends one, and a second, an error, when it fails after its OK
 * (ReceiveMessageResponseStreamWriter); a later status is kept only when it
 * is worse, so that no OK (or empty poll) after an error hides the error. */
static int status_rank(const mql_result *r) {
    if (r->ok) return 0;
    return strcmp(r->code, "MESSAGE_NOT_FOUND") == 0 ? 1 : 2;
}

/* Each frame is judged on its own (mql_inbound.h): a bad one costs only
 * itself, never the leases of the good ones around it. */
static void on_receive_message(mql_client *c, mql_call *call, grpc_byte_buffer *reply) {
    mql_consumer_part *cs = &c->consumer;
    receive_ctx *rx = call->ctx;
    grpc_slice slice;
    mql_frame f;
    const char *why;
    if (mql_read_all(reply, &slice) < 0) return;
    mql_frame_decode(&f, GRPC_SLICE_START_PTR(slice), GRPC_SLICE_LENGTH(slice), cs->max_body);
    grpc_slice_unref(slice);
    switch (f.kind) {
    case MQL_FRAME_STATUS:
        if (!rx->have_status || status_rank(&f.status) > status_rank(&rx->status))
            rx->status = f.status;
        rx->have_status = 1;
        break;
    case MQL_FRAME_MESSAGE:
        c->metrics.received++;
        if (cs->nacked_all) {
            /* the host has given everything back (close, shutdown): a message
             * this late would reach nobody, or a handler after the drain */
            mql_release_unseen(c, lease_begin(c, rx, &f.msg), 0, cs->nacked_all_delay_ms,
                               "arrived after close");
            break;
        }
        if ((why = past_bounds(rx, &f.msg)) != NULL) {
            /* more than was asked for: back at once, for whoever has room */
            mql_metrics_reason(&c->metrics.given_back, why);
            mql_release_unseen(c, lease_begin(c, rx, &f.msg), 0, 0, why);
            break;
        }
        rx->taken++;
        rx->bytes += f.msg.body_len;
        f.msg.lease_id = lease_begin(c, rx, &f.msg)->id;
        keep_message(rx, &f.msg);
        break;
    case MQL_FRAME_CORRUPTED:
        if (rx->cut) {
            /* past a bound it goes back like the rest, to be judged when it
             * comes again in its place (a FIFO queue's order) */
            mql_metrics_reason(&c->metrics.given_back, rx->cut);
            mql_release_unseen(c, lease_begin(c, rx, &f.msg), 0, 0, rx->cut);
            break;
        }
        /* it holds a lease like any other, but the host never sees it */
        mql_metrics_reason(&c->metrics.corrupted, f.reason);
        rx->taken++;   /* it was delivered for this batch all the same */
        mql_release_unseen(c, lease_begin(c, rx, &f.msg), cs->on_corrupt_dlq,
                           cs->corrupt_delay_ms, "corrupted");
        cut_behind(c, rx, "behind_corrupted");
        break;
    case MQL_FRAME_MALFORMED:
        mql_metrics_reason(&c->metrics.malformed, f.reason);
        if (rx->malformed++ == 0) rx->malformed_reason = f.reason;
        cut_behind(c, rx, "behind_malformed");
        break;
    case MQL_FRAME_OTHER:
        break;
    }
    mql_frame_clear(&f);
}

static void on_receive_done(mql_client *c, mql_call *call) {
    receive_ctx *rx = call->ctx;
    mql_event *ev = mql_event_new(MQL_EV_OP, call->op);
    /* the proxy answered, whatever it said: a session that lost it may go back now */
    if (call->status == GRPC_STATUS_OK) mql_session_proxy_answered(c);
    if (call->status != GRPC_STATUS_OK) {
        mql_call_result(call, NULL, &ev->result);
    } else if (rx->malformed > 0) {
        mql_result_fail(&ev->result, "PROTOCOL", "ReceiveMessage: %zu malformed frame(s), first: %s",
                        rx->malformed, rx->malformed_reason);
    } else if (rx->have_status) {
        ev->result = rx->status;
        if (!ev->result.ok && strcmp(ev->result.code, "MESSAGE_NOT_FOUND") == 0)
            mql_result_ok(&ev->result);   /* nothing within the long poll: an empty batch */
    } else {
        mql_result_fail(&ev->result, "PROTOCOL", "ReceiveMessage: the server sent no status");
    }
    /* The error is counted even when messages came: the host sees it in metrics. */
    if (!ev->result.ok) mql_metrics_error(&c->metrics, "receive", ev->result.code);
    /* Messages that arrived are leases now: hand them over whatever came after. */
    if (rx->n > 0) mql_result_ok(&ev->result);
    ev->msgs = rx->msgs;
    ev->nmsgs = rx->n;
    free(rx);
    call->ctx = NULL;
    mql_events_push(&c->events, ev);
}

const char *mql_receive_next_broker(mql_consumer_part *cs) {
    if (cs->nbrokers == 0) return NULL;
    return cs->brokers[cs->next_broker++ % cs->nbrokers];
}

static uint64_t receive_send(mql_client *c, uint64_t op, int batch, int64_t await_ms,
                             size_t max_bytes) {
    mql_consumer_part *cs = &c->consumer;
    Apache__Rocketmq__V2__ReceiveMessageRequest req =
        APACHE__ROCKETMQ__V2__RECEIVE_MESSAGE_REQUEST__INIT;
    Apache__Rocketmq__V2__MessageQueue mq = APACHE__ROCKETMQ__V2__MESSAGE_QUEUE__INIT;
    Apache__Rocketmq__V2__Broker broker = APACHE__ROCKETMQ__V2__BROKER__INIT;
    Apache__Rocketmq__V2__FilterExpression fe = APACHE__ROCKETMQ__V2__FILTER_EXPRESSION__INIT;
    mql_pb_resource group, topic;
    Google__Protobuf__Duration invisible, poll;
    receive_ctx *rx;
    mql_call *call;

    mql_set_resource(&group, c->namespace_, cs->group);
    mql_set_resource(&topic, c->namespace_, cs->topic);
    broker.name = (char *)mql_receive_next_broker(cs);
    mq.topic = &topic;
    mq.broker = &broker;
    mq.permission = APACHE__ROCKETMQ__V2__PERMISSION__READ_WRITE;
    fe.type = cs->filter_sql ? APACHE__ROCKETMQ__V2__FILTER_TYPE__SQL
                                     : APACHE__ROCKETMQ__V2__FILTER_TYPE__TAG;
    fe.expression = cs->filter;
    mql_set_duration(&invisible, cs->invisible_ms);
    mql_set_duration(&poll, await_ms);
    req.group = &group;
    req.message_queue = &mq;
    req.filter_expression = &fe;
    req.batch_size = batch;
    req.invisible_duration = &invisible;
    req.auto_renew = 0;   /* the lease is ours to renew, not the proxy's */
    req.long_polling_timeout = &poll;
    /* The proxy needs a deadline longer than the long poll, or it fails the
     * call; and it never polls for less than 5 s, whatever we ask. */
    rx = mql_xcalloc(1, sizeof(receive_ctx));
    /* with invisible = "auto" the value moves: the leases keep what was asked */
    rx->invisible_ms = cs->invisible_ms;
    rx->start_ms = mql_now_ms();
    rx->batch = batch > 0 ? (size_t)batch : 1;
    rx->max_bytes = max_bytes;
    call = mql_base_call(c, c->broker, MQL_M_RECEIVE,
                    (await_ms > MIN_PROXY_POLL_MS ? await_ms : MIN_PROXY_POLL_MS) +
                        c->request_timeout_ms,
                    &receive_ops, op, rx);
    if (mql_call_start_server_stream(call, &req.base) < 0) {
        free(call->ctx);
        mql_base_unlink(c, call);
        mql_call_free(call);
        mql_result r;
        mql_result_fail(&r, "INTERNAL", "receive: grpc refused to start the call");
        mql_base_post_op(c, op, &r);
    }
    return op;
}

uint64_t mql_receive_start(mql_client *c, int batch, int64_t await_ms, size_t max_bytes) {
    mql_consumer_part *cs = &c->consumer;
    uint64_t op = ++c->next_op;
    mql_receive_wait *w, **tail;
    if (!mql_renew_behind(c) && !cs->waiting) return receive_send(c, op, batch, await_ms, max_bytes);
    /* behind, or others wait already (they go first) */
    w = mql_xcalloc(1, sizeof(*w));
    w->op = op;
    w->batch = batch;
    w->await_ms = await_ms;
    w->max_bytes = max_bytes;
    w->since_ms = mql_now_ms();
    for (tail = &cs->waiting; *tail; tail = &(*tail)->next) {}
    *tail = w;
    c->metrics.receives_held++;
    return op;
}

/* A held receive answered without a call: empty (ok), or code. */
static void wait_end(mql_client *c, mql_receive_wait *w, const char *code, const char *msg) {
    mql_result r;
    if (code) mql_result_fail(&r, code, "%s", msg);
    else mql_result_ok(&r);
    if (!code) c->metrics.receives_held_empty++;
    mql_base_post_op(c, w->op, &r);
    free(w);
}

int64_t mql_receive_timers(mql_client *c, int64_t now, int64_t wake) {
    mql_consumer_part *cs = &c->consumer;
    int behind = mql_renew_behind(c);
    mql_receive_wait *w, **at = &cs->waiting;
    while ((w = *at)) {
        int64_t waited = now - w->since_ms;
        int64_t poll = w->await_ms > MIN_PROXY_POLL_MS ? w->await_ms : MIN_PROXY_POLL_MS;
        if (!behind || waited >= poll) {
            *at = w->next;
            /* a whole poll still fits in what the host was promised */
            if (!behind && (waited <= 0 || w->await_ms - waited >= MIN_PROXY_POLL_MS)) {
                receive_send(c, w->op, w->batch, w->await_ms - (waited > 0 ? waited : 0),
                             w->max_bytes);
                free(w);
            } else {
                wait_end(c, w, NULL, NULL);
            }
            continue;
        }
        if (w->since_ms + poll < wake) wake = w->since_ms + poll;
        at = &w->next;
    }
    return wake;
}

void mql_receive_end_waiting(mql_client *c, const char *code, const char *msg) {
    mql_receive_wait *w;
    while ((w = c->consumer.waiting)) {
        c->consumer.waiting = w->next;
        wait_end(c, w, code, msg);
    }
}

void mql_receive_cancel_all(mql_client *c) {
    mql_call *call;
    mql_receive_end_waiting(c, "CANCELLED", "receive: cancelled");
    for (call = c->calls; call; call = call->next)
        if (call->ops == &receive_ops) mql_call_cancel(call);
}

