/* mql_change.c -- ChangeInvisibleDuration, the one request that both keeps a
 * lease (a renewal: mql_renew.c) and gives it back (a nack: mql_release.c),
 * and how long a call needs on the session's new channel.
 *
 * It sits below both: a renewal and a nack send the same request with the
 * lease's newest receipt handle, each with the ops of its own stage, and the
 * renewal's retry and a release held for a reconnect measure the same time
 * left. Neither needs the other for it.
 *
 * Every function here runs with c->mu held.
 */
#include "mql_change.h"
#include "mql_lite.h"

#include <string.h>

int mql_change_start(mql_client *c, mql_lease *l, int64_t duration_ms,
                     const mql_call_ops *ops, uint64_t op, void *ctx) {
    Apache__Rocketmq__V2__ChangeInvisibleDurationRequest req =
        APACHE__ROCKETMQ__V2__CHANGE_INVISIBLE_DURATION_REQUEST__INIT;
    mql_pb_resource group, topic;
    Google__Protobuf__Duration d;
    char parent[MQL_TOPIC_NAME_MAX];
    const char *lite;
    mql_set_resource(&group, c->namespace_, c->consumer.group);
    mql_set_resource(&topic, c->namespace_,
                     mql_lite_split(mql_lease_topic(&c->consumer.leases, l), parent,
                                    sizeof(parent), &lite));
    req.lite_topic = (char *)lite;
    mql_set_duration(&d, duration_ms);
    req.group = &group;
    req.topic = &topic;
    req.receipt_handle = l->handle;
    req.message_id = l->message_id;
    req.invisible_duration = &d;
    return mql_base_unary(c, mql_base_call(c, c->broker, MQL_M_CHANGE, c->request_timeout_ms,
                                           ops, op, ctx),
                          &req.base);
}

/* How long a retried renewal must have before the deadline. A proxy that
 * went away (UNAVAILABLE) answered nothing, and the session is moving to a
 * live one: the retry goes there and takes what renewals take (K x the
 * observed p99) plus a new connection's setup (MQL_RECONNECT_NEEDS_MS), not
 * the worst case. Without that, a lease whose renewal fell due just as its
 * proxy died (a third of the window left) would be given up at once though
 * another proxy could renew it; without the connection's part, a retry on a
 * fast broker (p99 of a few ms) was still sent with milliseconds left and
 * reached the new proxy after the deadline (issue 20 item 4). A call never
 * takes longer than its request timeout, connection included: that stays the
 * ceiling. */
int64_t mql_change_new_channel_needs_ms(const mql_client *c) {
    int64_t need = MQL_PACE_P99_FACTOR * c->consumer.pace.p99_ms + MQL_RECONNECT_NEEDS_MS;
    return need < c->request_timeout_ms ? need : c->request_timeout_ms;
}

/* A renewal, the budget's nack and the host's nack alike: the lease is then
 * uncertain (the message may come back once more). */
int mql_change_unanswered(const char *code) {
    return strcmp(code, "TIMEOUT") == 0 || strcmp(code, "CANCELLED") == 0;
}
