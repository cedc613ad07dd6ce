/* mql_lite.h -- lite topics (RocketMQ 5.5, RIP-83): what a lite consumer says
 * and how its leases carry the lite topic each message came from.
 *
 * A lite consumer reads one LITE topic (the parent) through a group bound to
 * it (SubscriptionGroupAttributes "lite.bind.topic") and names the lite topics
 * under the parent it wants with SyncLiteSubscription. The 5.5.0 proxy pops
 * lite topics only for clients of type LITE_PUSH_CONSUMER
 * (ReceiveMessageActivity.receiveMessage -> popLiteMessage): mqlease says it is
 * one, and otherwise receives, renews and releases as a simple consumer does.
 *
 * A lease of a lite message keeps, as its topic, the broker's own name for the
 * lite topic's queue, "%LMQ%$<parent>$<lite>" (LiteUtil.toLmqName): ack,
 * ChangeInvisibleDuration and ForwardMessageToDeadLetterQueue send the parent
 * as their topic and the lite topic in their lite_topic field. Topic names
 * cannot hold a '$' (TopicValidator), so the split is unambiguous.
 */
#ifndef MQL_LITE_H
#define MQL_LITE_H

#include "mql_base.h"

#define MQL_LITE_PREFIX "%LMQ%$"
/* room for a parent topic's name (TopicValidator allows 127 characters) */
#define MQL_TOPIC_NAME_MAX 256

/* The client type a consumer registers with: LITE_PUSH_CONSUMER or SIMPLE_CONSUMER. */
int mql_lite_client_type(const mql_client *c);

/* The lease topic of a message from topic with lite topic lite (not empty), allocated
 * (the caller frees it). */
char *mql_lite_key(const char *topic, const char *lite);

/* The topic to send for a lease's topic key, and in *lite its lite topic ("" if none; it
 * points into key). The parent is copied into buf (n bytes) when key is a lite key. */
const char *mql_lite_split(const char *key, char *buf, size_t n, const char **lite);

/* SyncLiteSubscription: action (apache.rocketmq.v2.LiteSubscriptionAction) on the lite
 * topics names[0..n) of the consumer's topic. An op; its event carries the result. The
 * kept set (c->consumer.lite_set) takes the change at once and gives it back when the
 * sync fails, refused or unanswered (mql_lite.c, sync_undo). */
uint64_t mql_lite_sync(mql_client *c, int action, const char *const *names, size_t n);
/* After a reconnect: the whole kept set again (COMPLETE_ADD), no event for the host. The
 * 5.5.0 broker keeps a client's lite subscription with the channel of the proxy that sent
 * it (LiteSubscriptionRegistryImpl.updateClientChannel) and tells that channel which lite
 * topics have messages, so a consumer moved to another proxy would hear of none. */
void mql_lite_resync(mql_client *c);
/* Runs the periodic re-send (every c->consumer.lite_sync_every_ms once the consumer is
 * ready: the 5.5.0 broker drops a subscription whose set was not sent for
 * liteSubscriptionCheckTimeoutMills, 3 min, LiteSubscriptionRegistryImpl
 * .cleanupExpiredSubscriptions, and the official clients send theirs every 30 s);
 * returns the earlier of wake and its next time. */
int64_t mql_lite_timers(mql_client *c, int64_t now, int64_t wake);
/* Frees the kept set. */
void mql_lite_free(mql_consumer_part *cs);

#endif
