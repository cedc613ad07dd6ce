/* dv_call.c -- a call's replies and status on the grpc core API, the list of
 * calls waiting for a later answer, and the clients that sent settings.
 * Replies of a server stream (ReceiveMessage) and of the Telemetry bidi
 * stream go through the same per-call send queue (see dv_call.h). */
#include "dv_call.h"

#include <stdlib.h>
#include <string.h>

#include "mql.h"
#include "mql_codec.h"

void dv_set_status(Apache__Rocketmq__V2__Status *st, int code, const char *msg) {
    apache__rocketmq__v2__status__init(st);
    st->code = code;
    st->message = (char *)msg;
}

int dv_chance(dv_server *s, double p) {
    return p > 0 && (double)rand_r(&s->seed) / RAND_MAX < p;
}

void dv_reply(dv_call *c, const ProtobufCMessage *msg) {
    if (c->nout == c->capout) {
        c->capout = c->capout ? c->capout * 2 : 4;
        c->out = realloc(c->out, c->capout * sizeof(*c->out));
        if (!c->out) abort();
    }
    c->out[c->nout++] = mql_pack(msg);
}

void dv_reply_raw(dv_call *c, const uint8_t *bytes, size_t len) {
    grpc_slice slice = grpc_slice_from_copied_buffer((const char *)bytes, len);
    if (c->nout == c->capout) {
        c->capout = c->capout ? c->capout * 2 : 4;
        c->out = realloc(c->out, c->capout * sizeof(*c->out));
        if (!c->out) abort();
    }
    c->out[c->nout++] = grpc_raw_byte_buffer_create(&slice, 1);
    grpc_slice_unref(slice);
}

void dv_call_free(dv_call *c) {
    size_t i;
    if (c->producer_listed && c->srv) {
        dv_server *s = c->srv;
        for (i = 0; i < s->nproducers; i++) {
            if (s->producers[i] == c) {
                s->producers[i] = s->producers[--s->nproducers];
                break;
            }
        }
    }
    for (i = 0; i < c->npub; i++) free(c->pub_topics[i]);
    free(c->pub_topics);
    if (c->call) grpc_call_unref(c->call);
    grpc_call_details_destroy(&c->details);
    grpc_metadata_array_destroy(&c->md);
    if (c->req) grpc_byte_buffer_destroy(c->req);
    for (i = c->iout; i < c->nout; i++) grpc_byte_buffer_destroy(c->out[i]);
    free(c->out);
    if (c->rx) protobuf_c_message_free_unpacked(&c->rx->base, NULL);
    free(c);
}

/* A detached call (no grpc call) sends nothing: its replies are only built. */
void dv_call_start(dv_call *c, grpc_op *ops, size_t n, tag *t) {
    if (!c->call) return;
    if (grpc_call_start_batch(c->call, ops, n, t, NULL) == GRPC_CALL_OK) c->in_flight++;
}

/* Sends the next queued reply, or the status once everything went out; the
 * initial metadata rides with whichever goes first. */
void dv_pump(dv_call *c) {
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
        dv_call_start(c, ops, n, &c->t_send);
    } else if (c->finishing) {
        ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
        ops[n].data.send_status_from_server.status = c->status;
        ops[n++].data.send_status_from_server.trailing_metadata_count = 0;
        c->status_sent = 1;
        dv_call_start(c, ops, n, &c->t_status);
    }
}

void dv_finish(dv_call *c, grpc_status_code status) {
    c->finishing = 1;
    c->status = status;
    dv_pump(c);
}

void dv_recv_next(dv_call *c) {
    grpc_op op;
    memset(&op, 0, sizeof(op));
    op.op = GRPC_OP_RECV_MESSAGE;
    op.data.recv_message.recv_message = &c->req;
    dv_call_start(c, &op, 1, &c->t_recv);
}

void dv_client_register(dv_server *s, const char *id, int consumer) {
    size_t i;
    for (i = 0; i < s->nclients; i++)
        if (strcmp(s->clients[i].id, id) == 0) return;
    s->clients = realloc(s->clients, (s->nclients + 1) * sizeof(*s->clients));
    if (!s->clients) abort();
    s->clients[s->nclients].id = mql_strdup(id);
    s->clients[s->nclients].consumer = consumer;
    s->nclients++;
}

int dv_client_known(dv_server *s, const char *id) {
    size_t i;
    for (i = 0; i < s->nclients; i++)
        if (strcmp(s->clients[i].id, id) == 0) return 1;
    return 0;
}

void dv_client_forget(dv_server *s, const char *id) {
    size_t i;
    for (i = 0; i < s->nclients; i++) {
        if (strcmp(s->clients[i].id, id) == 0) {
            free(s->clients[i].id);
            s->clients[i] = s->clients[--s->nclients];
            return;
        }
    }
}

void dv_wait_add(dv_server *s, dv_call *c) {
    if (c->listed) return;
    c->listed = 1;
    c->next = s->waiting;
    s->waiting = c;
}

void dv_wait_remove(dv_server *s, dv_call *c) {
    dv_call **pp = &s->waiting;
    if (!c->listed) return;
    while (*pp && *pp != c) pp = &(*pp)->next;
    if (*pp) *pp = c->next;
    c->listed = 0;
}

void dv_producer_add(dv_server *s, dv_call *c) {
    if (c->producer_listed) return;
    if (s->nproducers == s->capproducers) {
        s->capproducers = s->capproducers ? s->capproducers * 2 : 8;
        s->producers = realloc(s->producers, s->capproducers * sizeof(*s->producers));
        if (!s->producers) abort();
    }
    s->producers[s->nproducers++] = c;
    c->producer_listed = 1;
}

dv_call *dv_producer_for(dv_server *s, const char *topic) {
    size_t i = s->nproducers, j;
    while (i-- > 0) {
        dv_call *c = s->producers[i];
        if (c->closed || c->cancelled || c->finishing) continue;
        for (j = 0; j < c->npub; j++)
            if (strcmp(c->pub_topics[j], topic) == 0) return c;
    }
    return NULL;
}
