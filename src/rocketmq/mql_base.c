/* mql_base.c -- the floor of a client: its calls and its events (the struct
 * and the map of the files on it are in mql_base.h).
 *
 * Each call carries the ops of the stage that started it (mql_call_ops): when
 * a reply or the end of the call arrives, the client thread runs them through
 * the two hooks here, which know no stage, only the ops. Nothing here knows
 * what a call is for, and nothing here calls a stage by name.
 *
 * Every function here runs with c->mu held.
 */
#include "mql_base.h"

/* -------------------------------------------------------------- helpers */

uint64_t mql_base_random(mql_client *c) {
    /* xorshift64*: jitter only, no need for quality */
    c->rand_state ^= c->rand_state >> 12;
    c->rand_state ^= c->rand_state << 25;
    c->rand_state ^= c->rand_state >> 27;
    return c->rand_state * 2685821657736338717ULL;
}

void mql_base_post_op(mql_client *c, uint64_t op, const mql_result *r) {
    mql_event *ev = mql_event_new(MQL_EV_OP, op);
    ev->result = *r;
    mql_events_push(&c->events, ev);
}

uint64_t mql_base_post_refusal(mql_client *c, const char *code, const char *msg) {
    mql_result r;
    uint64_t op = ++c->next_op;
    mql_result_fail(&r, code, "%s", msg);
    mql_base_post_op(c, op, &r);
    return op;
}

void mql_base_post_lease(mql_client *c, const mql_lease *l, mql_lease_state state) {
    mql_event *ev = mql_event_new(MQL_EV_LEASE, 0);
    ev->lease_id = l->id;
    ev->lease_state = state;
    ev->lease_renewals = l->renewals;
    mql_events_push(&c->events, ev);
}

/* ------------------------------------------------------------ call plumbing */

static void on_call_done(mql_call *call);
static void on_call_message(mql_call *call, grpc_byte_buffer *reply);

mql_call *mql_base_call(mql_client *c, mql_channel *ch, const char *method,
                        int64_t timeout_ms, const mql_call_ops *ops, uint64_t op, void *ctx) {
    mql_call *call = mql_call_new(ch, c->cq, method, timeout_ms, &c->id);
    call->owner = c;
    call->ops = ops;
    call->op = op;
    call->ctx = ctx;
    call->on_done = on_call_done;
    call->on_message = on_call_message;
    call->next = c->calls;
    if (c->calls) c->calls->prev = call;
    c->calls = call;
    return call;
}

void mql_base_unlink(mql_client *c, mql_call *call) {
    if (call->prev) call->prev->next = call->next;
    else c->calls = call->next;
    if (call->next) call->next->prev = call->prev;
    call->prev = call->next = NULL;
}

int mql_base_unary(mql_client *c, mql_call *call, const ProtobufCMessage *req) {
    if (!c->stopping && mql_call_start_unary(call, req) == 0) return 0;
    mql_base_unlink(c, call);
    mql_call_free(call);
    return -1;
}

/* ------------------------------------------------------------ the ops */

static void on_call_message(mql_call *call, grpc_byte_buffer *reply) {
    if (call->ops->on_message) call->ops->on_message(call->owner, call, reply);
}

static void on_call_done(mql_call *call) {
    mql_client *c = call->owner;
    mql_base_unlink(c, call);
    call->ops->on_done(c, call);
    mql_call_free(call);
}
