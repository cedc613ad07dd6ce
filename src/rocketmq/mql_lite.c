/* mql_lite.c -- lite topics (RocketMQ 5.5, RIP-83): see mql_lite.h.
 *
 * Every function here runs with c->mu held.
 */
#include "mql_lite.h"

#include <stdlib.h>
#include <string.h>

static void on_sync_done(mql_client *c, mql_call *call);

static const mql_call_ops sync_ops = {.on_done = on_sync_done};

int mql_lite_client_type(const mql_client *c) {
    return c->consumer.lite ? APACHE__ROCKETMQ__V2__CLIENT_TYPE__LITE_PUSH_CONSUMER
                            : APACHE__ROCKETMQ__V2__CLIENT_TYPE__SIMPLE_CONSUMER;
}

char *mql_lite_key(const char *topic, const char *lite) {
    size_t pl = sizeof(MQL_LITE_PREFIX) - 1, tl, ll;
    char *key;
    tl = strlen(topic);
    ll = strlen(lite);
    key = mql_xmalloc(pl + tl + 1 + ll + 1);
    memcpy(key, MQL_LITE_PREFIX, pl);
    memcpy(key + pl, topic, tl);
    key[pl + tl] = '$';
    memcpy(key + pl + tl + 1, lite, ll + 1);
    return key;
}

const char *mql_lite_split(const char *key, char *buf, size_t n, const char **lite) {
    size_t pl = sizeof(MQL_LITE_PREFIX) - 1, tl;
    const char *sep;
    *lite = "";
    if (strncmp(key, MQL_LITE_PREFIX, pl) != 0) return key;
    sep = strchr(key + pl, '$');
    if (!sep || (tl = (size_t)(sep - (key + pl))) + 1 > n) return key;
    memcpy(buf, key + pl, tl);
    buf[tl] = '\0';
    *lite = sep + 1;
    return buf;
}

/* ------------------------------------------------------------ the kept set */

static size_t set_find(const mql_consumer_part *cs, const char *name) {
    size_t i;
    for (i = 0; i < cs->nlite && strcmp(cs->lite_set[i], name) != 0; i++) {}
    return i;
}

static void set_add(mql_consumer_part *cs, const char *name) {
    char **grown;
    if (set_find(cs, name) < cs->nlite) return;
    grown = realloc(cs->lite_set, (cs->nlite + 1) * sizeof(char *));
    if (!grown) abort();   /* as mql_xmalloc: no partial-failure path for memory */
    cs->lite_set = grown;
    cs->lite_set[cs->nlite++] = mql_strdup(name);
}

static void set_remove(mql_consumer_part *cs, const char *name) {
    size_t i = set_find(cs, name);
    if (i == cs->nlite) return;
    free(cs->lite_set[i]);
    cs->lite_set[i] = cs->lite_set[--cs->nlite];
}

void mql_lite_free(mql_consumer_part *cs) {
    while (cs->nlite > 0) free(cs->lite_set[--cs->nlite]);
    free(cs->lite_set);
    cs->lite_set = NULL;
}

/* What action on names makes of the kept set. */
static void set_apply(mql_consumer_part *cs, int action, const char *const *names, size_t n) {
    size_t i;
    if (action == APACHE__ROCKETMQ__V2__LITE_SUBSCRIPTION_ACTION__COMPLETE_ADD ||
        action == APACHE__ROCKETMQ__V2__LITE_SUBSCRIPTION_ACTION__COMPLETE_REMOVE)
        mql_lite_free(cs);
    if (action == APACHE__ROCKETMQ__V2__LITE_SUBSCRIPTION_ACTION__COMPLETE_REMOVE) return;
    for (i = 0; i < n; i++) {
        if (action == APACHE__ROCKETMQ__V2__LITE_SUBSCRIPTION_ACTION__PARTIAL_REMOVE)
            set_remove(cs, names[i]);
        else
            set_add(cs, names[i]);
    }
}

/* ------------------------------------------------------------ undoing a sync */

/* What takes a host's sync back out of the kept set when it fails: the set
 * follows what the host asked for at once (so a re-sync started meanwhile
 * carries it), and a sync that failed, refused or unanswered, is undone, as
 * the official clients' LiteSubscriptionManager (apache/rocketmq-clients,
 * Java) adds a lite topic only after subscribeLite succeeded and removes one
 * only after unsubscribeLite did. A refused name (LITE_SUBSCRIPTION_QUOTA_EXCEEDED,
 * ILLEGAL_LITE_TOPIC) kept anyway went out again, unasked, in every
 * COMPLETE_ADD after the host was told it failed. The call owns it. */
typedef struct sync_undo {
    int action;     /* the action that undoes it, applied with set_apply */
    size_t n;
    char **names;
} sync_undo;

static void undo_push(sync_undo *u, const char *name) {
    u->names[u->n++] = mql_strdup(name);
}

static void undo_free(sync_undo *u) {
    if (!u) return;
    while (u->n > 0) free(u->names[--u->n]);
    free(u->names);
    free(u);
}

/* Applies action on names to the kept set; returns what undoes it. */
static sync_undo *set_change(mql_consumer_part *cs, int action, const char *const *names,
                             size_t n) {
    int removes = action == APACHE__ROCKETMQ__V2__LITE_SUBSCRIPTION_ACTION__PARTIAL_REMOVE;
    sync_undo *u = mql_xcalloc(1, sizeof(*u));
    size_t i;
    if (action == APACHE__ROCKETMQ__V2__LITE_SUBSCRIPTION_ACTION__COMPLETE_ADD ||
        action == APACHE__ROCKETMQ__V2__LITE_SUBSCRIPTION_ACTION__COMPLETE_REMOVE) {
        /* undone by setting the set it replaced */
        u->action = APACHE__ROCKETMQ__V2__LITE_SUBSCRIPTION_ACTION__COMPLETE_ADD;
        u->names = mql_xcalloc(cs->nlite, sizeof(char *));
        for (i = 0; i < cs->nlite; i++) undo_push(u, cs->lite_set[i]);
        set_apply(cs, action, names, n);
        return u;
    }
    /* undone by taking back only the names whose presence it changed */
    u->action = removes ? APACHE__ROCKETMQ__V2__LITE_SUBSCRIPTION_ACTION__PARTIAL_ADD
                        : APACHE__ROCKETMQ__V2__LITE_SUBSCRIPTION_ACTION__PARTIAL_REMOVE;
    u->names = mql_xcalloc(n, sizeof(char *));
    for (i = 0; i < n; i++) {
        if ((set_find(cs, names[i]) < cs->nlite) != removes) continue;
        undo_push(u, names[i]);
        set_apply(cs, action, &names[i], 1);
    }
    return u;
}

/* ------------------------------------------------------------ the call */

/* Starts SyncLiteSubscription for op (0: the client's own, no event, undo
 * NULL); -1 if grpc refused it, undo then still the caller's. */
static int sync_start(mql_client *c, int action, const char *const *names, size_t n, uint64_t op,
                      sync_undo *undo) {
    Apache__Rocketmq__V2__SyncLiteSubscriptionRequest req =
        APACHE__ROCKETMQ__V2__SYNC_LITE_SUBSCRIPTION_REQUEST__INIT;
    mql_pb_resource group, topic;
    mql_call *call;
    mql_set_resource(&group, c->namespace_, c->consumer.group);
    mql_set_resource(&topic, c->namespace_, c->consumer.topic);
    req.action = (Apache__Rocketmq__V2__LiteSubscriptionAction)action;
    req.topic = &topic;
    req.group = &group;
    req.n_lite_topic_set = n;
    req.lite_topic_set = (char **)names;
    call = mql_base_call(c, c->broker, MQL_M_SYNC_LITE, c->request_timeout_ms, &sync_ops, op, undo);
    return mql_base_unary(c, call, &req.base);
}

uint64_t mql_lite_sync(mql_client *c, int action, const char *const *names, size_t n) {
    uint64_t op = ++c->next_op;
    sync_undo *undo = set_change(&c->consumer, action, names, n);
    if (sync_start(c, action, names, n, op, undo) < 0) {
        set_apply(&c->consumer, undo->action, (const char *const *)undo->names, undo->n);
        undo_free(undo);
        op = mql_base_post_refusal(c, "INTERNAL", "sync_lite: grpc refused to start the call");
    }
    return op;
}

int64_t mql_lite_timers(mql_client *c, int64_t now, int64_t wake) {
    mql_consumer_part *cs = &c->consumer;
    if (c->type != MQL_CONSUMER || !cs->lite || c->stopping || c->state != MQL_CLIENT_READY) return wake;
    if (!cs->lite_sync_at) cs->lite_sync_at = now + cs->lite_sync_every_ms;   /* just ready */
    if (now >= cs->lite_sync_at) {
        /* while reconnecting the settings' arrival sends it (mql_session.c) */
        if (!c->reconnecting) mql_lite_resync(c);
        cs->lite_sync_at = now + cs->lite_sync_every_ms;
    }
    return cs->lite_sync_at < wake ? cs->lite_sync_at : wake;
}

void mql_lite_resync(mql_client *c) {
    mql_consumer_part *cs = &c->consumer;
    if (!cs->lite || cs->nlite == 0) return;
    if (sync_start(c, APACHE__ROCKETMQ__V2__LITE_SUBSCRIPTION_ACTION__COMPLETE_ADD,
                   (const char *const *)cs->lite_set, cs->nlite, 0, NULL) < 0)
        mql_metrics_error(&c->metrics, "sync_lite", "INTERNAL");
}

/* A proxy before 5.5 has no such method: the call ends UNIMPLEMENTED. A
 * re-sync's (op 0) failure is only counted: the next reconnect sends the set
 * again, and the host's own syncs each send what they change. A host's sync
 * that failed is taken back out of the kept set (sync_undo); whatever of it
 * the broker took all the same, the next COMPLETE_ADD replaces. */
static void on_sync_done(mql_client *c, mql_call *call) {
    mql_event *ev = mql_event_new(MQL_EV_OP, call->op);
    sync_undo *undo = call->ctx;
    Apache__Rocketmq__V2__SyncLiteSubscriptionResponse *resp =
        mql_call_reply(call, &apache__rocketmq__v2__sync_lite_subscription_response__descriptor,
                       &ev->result);
    if (!ev->result.ok) mql_metrics_error(&c->metrics, "sync_lite", ev->result.code);
    if (undo && !ev->result.ok)
        set_apply(&c->consumer, undo->action, (const char *const *)undo->names, undo->n);
    undo_free(undo);
    call->ctx = NULL;
    mql_call_reply_free(resp);
    if (call->op) mql_events_push(&c->events, ev);
    else mql_event_free(ev);
}
