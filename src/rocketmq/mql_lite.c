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

uint64_t mql_lite_sync(mql_client *c, int action, const char *const *names, size_t n) {
    Apache__Rocketmq__V2__SyncLiteSubscriptionRequest req =
        APACHE__ROCKETMQ__V2__SYNC_LITE_SUBSCRIPTION_REQUEST__INIT;
    mql_pb_resource group, topic;
    mql_call *call;
    uint64_t op = ++c->next_op;
    mql_set_resource(&group, c->namespace_, c->consumer.group);
    mql_set_resource(&topic, c->namespace_, c->consumer.topic);
    req.action = (Apache__Rocketmq__V2__LiteSubscriptionAction)action;
    req.topic = &topic;
    req.group = &group;
    req.n_lite_topic_set = n;
    req.lite_topic_set = (char **)names;
    call = mql_base_call(c, c->broker, MQL_M_SYNC_LITE, c->request_timeout_ms, &sync_ops, op, NULL);
    if (mql_base_unary(c, call, &req.base) < 0)
        op = mql_base_post_refusal(c, "INTERNAL", "sync_lite: grpc refused to start the call");
    return op;
}

/* A proxy before 5.5 has no such method: the call ends UNIMPLEMENTED. */
static void on_sync_done(mql_client *c, mql_call *call) {
    mql_event *ev = mql_event_new(MQL_EV_OP, call->op);
    Apache__Rocketmq__V2__SyncLiteSubscriptionResponse *resp =
        mql_call_reply(call, &apache__rocketmq__v2__sync_lite_subscription_response__descriptor,
                       &ev->result);
    if (!ev->result.ok) mql_metrics_error(&c->metrics, "sync_lite", ev->result.code);
    mql_call_reply_free(resp);
    mql_events_push(&c->events, ev);
}
