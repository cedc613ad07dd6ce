/* dv_server.c -- the dev broker's server loop on the grpc core server API.
 *
 * One thread waits on the completion queue with a 20 ms deadline; between
 * events it answers long polls that can now be served, delayed answers that
 * are due, and expiries. Calls and their handlers: dv_call.h.
 */
#include "dv_call.h"

#include <grpc/grpc_security.h>
#include <grpc/support/time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mql.h"
#include "mql_codec.h"

#define PFX "/apache.rocketmq.v2.MessagingService/"

static const struct { const char *path; method m; } methods[] = {
    {PFX "QueryRoute", M_ROUTE},       {PFX "Heartbeat", M_HEARTBEAT},
    {PFX "SendMessage", M_SEND},       {PFX "ReceiveMessage", M_RECEIVE},
    {PFX "AckMessage", M_ACK},         {PFX "Telemetry", M_TELEMETRY},
    {PFX "NotifyClientTermination", M_TERMINATE},
    {PFX "ChangeInvisibleDuration", M_CHANGE},
    {PFX "EndTransaction", M_END_TRANSACTION},
};

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
    dv_call_start(c, &ops[0], 1, &c->t_close);
    dv_recv_next(c);
}

/* The Telemetry streams, so that `reconnect` can reach each one. */
static void stream_add(dv_server *s, dv_call *c) {
    if (c->streamed) return;
    c->streamed = 1;
    c->next_stream = s->streams;
    s->streams = c;
}

static void stream_remove(dv_server *s, dv_call *c) {
    dv_call **pp;
    if (!c->streamed) return;
    for (pp = &s->streams; *pp; pp = &(*pp)->next_stream) {
        if (*pp == c) {
            *pp = c->next_stream;
            break;
        }
    }
    c->streamed = 0;
}

/* ReconnectEndpointsCommand (rocketmq-apis 2.1.x) on every open stream, as a
 * proxy would ask its clients to reconnect; it carries only a nonce. */
static void streams_reconnect(dv_server *s) {
    dv_call *c;
    for (c = s->streams; c; c = c->next_stream) {
        Apache__Rocketmq__V2__TelemetryCommand out = APACHE__ROCKETMQ__V2__TELEMETRY_COMMAND__INIT;
        Apache__Rocketmq__V2__ReconnectEndpointsCommand rc =
            APACHE__ROCKETMQ__V2__RECONNECT_ENDPOINTS_COMMAND__INIT;
        char nonce[32];
        if (c->finishing || c->closed || c->cancelled) continue;
        snprintf(nonce, sizeof(nonce), "dv-%llu", (unsigned long long)++s->nonces);
        rc.nonce = nonce;
        out.command_case = APACHE__ROCKETMQ__V2__TELEMETRY_COMMAND__COMMAND_RECONNECT_ENDPOINTS_COMMAND;
        out.reconnect_endpoints_command = &rc;
        dv_reply(c, &out.base);
        dv_pump(c);
    }
}

static void on_recv(dv_server *s, dv_call *c) {
    if (!c->req) {   /* the client half-closed (Telemetry) or sent nothing */
        dv_finish(c, GRPC_STATUS_OK);
        return;
    }
    if (c->m == M_TELEMETRY) {
        stream_add(s, c);
        dv_on_telemetry(s, c);
        return;
    }
    if (!c->client_id[0]) {
        /* as the proxy: every call needs x-mq-client-id */
        dv_finish(c, GRPC_STATUS_OK);   /* (a unary without reply: clients treat as failure) */
        return;
    }
    if (s->faults.paused) {
        dv_wait_add(s, c);
        return;
    }
    dv_dispatch(s, c);
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
        dv_call_free(c);
}

static void on_event(dv_server *s, tag *t, int success) {
    dv_call *c = t->c;
    if (t->what == T_NEW) {
        if (!success) {
            dv_call_free(c);
            return;
        }
        on_new(s, c);
        return;
    }
    c->in_flight--;
    switch (t->what) {
    case T_RECV:
        if (success) on_recv(s, c);
        else dv_finish(c, GRPC_STATUS_OK);
        break;
    case T_SEND:
        grpc_byte_buffer_destroy(c->out[c->iout]);
        c->out[c->iout++] = NULL;
        c->sending = 0;
        dv_pump(c);
        break;
    case T_STATUS:
        break;
    case T_CLOSE:
        c->closed = 1;
        break;
    }
    if (c->in_flight == 0 && c->closed && (c->status_sent || c->cancelled)) {
        /* off the waiting list before freeing */
        dv_wait_remove(s, c);
        stream_remove(s, c);
        dv_call_free(c);
    }
}

/* Long polls, delayed answers, paused calls, dropped streams.
 * A call leaves the list before anything can answer or re-list it: calls
 * parked during a pause are taken off first and dispatched after the walk,
 * and a call that has its answer (finishing) is never served again. */
static void tick(dv_server *s) {
    dv_call **pp = &s->waiting, *parked = NULL;
    int64_t now = mql_wall_ms();
    /* armed until it cancels a stream: a receive still on its way when the
     * command came (a loaded client, a session not yet ready) is dropped
     * when it arrives, instead of the command doing nothing */
    int drop = s->faults.drop_streams;
    uint64_t dropped = 0;
    if (s->faults.reconnect_streams) {
        s->faults.reconnect_streams = 0;
        streams_reconnect(s);
    }
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
                dv_finish(c, GRPC_STATUS_OK);
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
            dropped++;
            done = 1;
        } else {
            done = dv_try_receive(s, c, now);
        }
        if (done) {
            *pp = c->next;
            c->listed = 0;
        } else {
            pp = &c->next;
        }
    }
    if (dropped) {
        s->faults.drop_streams = 0;
        s->streams_dropped += dropped;
    }
    while (parked) {
        dv_call *c = parked;
        parked = c->next;
        c->next = NULL;
        dv_dispatch(s, c);   /* a long poll it cannot answer yet lists it again */
    }
    if (!s->faults.paused) dv_check_transactions(s, now);
}

dv_server *dv_server_new(const char *listen, int *port) {
    dv_server *s = mql_xcalloc(1, sizeof(*s));
    grpc_server_credentials *cr;
    grpc_arg arg;
    grpc_channel_args args;
    mql_absl_quiet();
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
    dv_half_init(&s->halves);
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
    int64_t now = mql_wall_ms();
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
    const dv_halves *h = &s->halves;
    snprintf(buf, len,
             "calls=%llu sent=%llu delivered=%llu acks=%llu changes=%llu topics=%zu clients=%zu"
             " gzip=%llu corrupt_digest=%llu bomb=%llu malformed=%llu truncated_frame=%llu"
             " tx_open=%zu tx_begun=%llu tx_committed=%llu tx_rolled_back=%llu tx_checks=%llu"
             " tx_dropped=%llu tx_ends_lost=%llu streams_dropped=%llu",
             (unsigned long long)s->served, (unsigned long long)s->sent,
             (unsigned long long)s->received, (unsigned long long)s->acks,
             (unsigned long long)s->changes, s->store.ntopics, s->nclients,
             (unsigned long long)s->wire.gzip, (unsigned long long)s->wire.corrupt,
             (unsigned long long)s->wire.bomb, (unsigned long long)s->wire.malformed,
             (unsigned long long)s->wire.truncated, h->n, (unsigned long long)h->begun,
             (unsigned long long)h->committed, (unsigned long long)h->rolled_back,
             (unsigned long long)h->checks, (unsigned long long)h->dropped,
             (unsigned long long)h->ends_lost, (unsigned long long)s->streams_dropped);
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
    dv_half_free(&s->halves);
    free(s->producers);
    pthread_mutex_destroy(&s->mu);
    free(s);
    grpc_shutdown();
}

/* ------------------------------------------------------------ without a transport */

void dv_server_handle(dv_server *s, const char *rpc, const char *client_id, const uint8_t *req,
                      size_t len) {
    dv_call *c = mql_xcalloc(1, sizeof(*c));
    grpc_slice slice = grpc_slice_from_copied_buffer((const char *)req, len);
    size_t i;
    c->srv = s;
    grpc_call_details_init(&c->details);
    c->details.deadline = gpr_inf_future(GPR_CLOCK_REALTIME);
    grpc_metadata_array_init(&c->md);
    for (i = 0; i < sizeof(methods) / sizeof(methods[0]); i++)
        if (strcmp(methods[i].path + strlen(PFX), rpc) == 0) c->m = methods[i].m;
    snprintf(c->client_id, sizeof(c->client_id), "%s", client_id);
    c->req = grpc_raw_byte_buffer_create(&slice, 1);
    grpc_slice_unref(slice);
    pthread_mutex_lock(&s->mu);
    on_recv(s, c);
    /* a long poll still waiting: end it now, as its poll time would */
    if (c->listed && c->rx && !c->finishing) dv_try_receive(s, c, mql_add_ms(c->poll_until, 1));
    dv_wait_remove(s, c);
    stream_remove(s, c);
    pthread_mutex_unlock(&s->mu);
    dv_call_free(c);
}

void dv_server_reset(dv_server *s) {
    size_t i;
    pthread_mutex_lock(&s->mu);
    for (i = 0; i < s->nclients; i++) free(s->clients[i].id);
    free(s->clients);
    s->clients = NULL;
    s->nclients = 0;
    dv_store_free(&s->store);
    dv_store_init(&s->store);
    dv_half_free(&s->halves);
    dv_half_init(&s->halves);
    dv_faults_init(&s->faults);
    pthread_mutex_unlock(&s->mu);
}
