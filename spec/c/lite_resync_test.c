/* lite_resync_test.c -- a lite consumer's subscription across a reconnect,
 * without a server (client_fixture.h).
 *
 * The 5.5.0 broker keeps a client's lite subscription with the channel of the
 * proxy that sent SyncLiteSubscription (LiteSubscriptionRegistryImpl
 * .updateClientChannel) and tells that channel which lite topics have
 * messages. A consumer whose session moved to another proxy (a killed proxy,
 * ReconnectEndpointsCommand) had said nothing to the new one, so its lite
 * topics went quiet. The set it asked for is now kept and sent again, whole,
 * once the new proxy has our settings, and every lite_sync_every_ms as the
 * official clients do (the broker drops a subscription not sent again for
 * liteSubscriptionCheckTimeoutMills, 3 min: a consumer that said its set once
 * stopped receiving a few minutes after its start). */
#include "client_fixture.h"
#include "mql_lite.h"
#include "mql_test.h"

enum { ADD = APACHE__ROCKETMQ__V2__LITE_SUBSCRIPTION_ACTION__PARTIAL_ADD,
       REMOVE = APACHE__ROCKETMQ__V2__LITE_SUBSCRIPTION_ACTION__PARTIAL_REMOVE,
       SET = APACHE__ROCKETMQ__V2__LITE_SUBSCRIPTION_ACTION__COMPLETE_ADD,
       CLEAR = APACHE__ROCKETMQ__V2__LITE_SUBSCRIPTION_ACTION__COMPLETE_REMOVE };

static int kept(const mql_client *c, const char *name) {
    size_t i;
    for (i = 0; i < c->consumer.nlite; i++)
        if (strcmp(c->consumer.lite_set[i], name) == 0) return 1;
    return 0;
}

/* The SyncLiteSubscription calls in flight, and the op of the newest. */
static int syncs(const mql_client *c, uint64_t *newest_op) {
    const mql_call *call;
    int n = 0;
    for (call = c->calls; call; call = call->next)
        if (strcmp(call->method, MQL_M_SYNC_LITE) == 0) {
            if (n++ == 0 && newest_op) *newest_op = call->op;
        }
    return n;
}

static uint64_t errors(const mql_client *c, const char *op, const char *code) {
    int i;
    for (i = 0; i < c->metrics.nerrors; i++)
        if (strcmp(c->metrics.errors[i].op, op) == 0 && strcmp(c->metrics.errors[i].code, code) == 0)
            return c->metrics.errors[i].n;
    return 0;
}

/* Takes and frees the events queued so far; how many are op's results. */
static int take_results(mql_client *c, uint64_t op) {
    mql_event *ev = mql_events_take(&c->events), *next;
    int n = 0;
    for (; ev; ev = next) {
        next = ev->next;
        n += ev->kind == MQL_EV_OP && ev->op == op;
        mql_event_free(ev);
    }
    return n;
}

static void lite_client(mql_client *c) {
    fixture_client_init(c);
    c->host = "127.0.0.1";
    c->port = 1;
    c->nendpoints = 1;
    c->consumer.lite = 1;
    mql_backoff_init(&c->reconnect, 200, 10000);
}

static void the_set_asked_for_is_kept(void) {
    mql_client c;
    const char *ab[] = {"a", "b"}, *a[] = {"a"}, *cb[] = {"c", "b"};
    lite_client(&c);
    mql_lite_sync(&c, SET, ab, 2);
    mql_lite_sync(&c, REMOVE, a, 1);
    mql_lite_sync(&c, ADD, cb, 2);
    CHECK(c.consumer.nlite == 2 && kept(&c, "b") && kept(&c, "c") && !kept(&c, "a"));
    mql_lite_sync(&c, SET, a, 1);
    CHECK(c.consumer.nlite == 1 && kept(&c, "a"));
    mql_lite_sync(&c, CLEAR, NULL, 0);
    CHECK(c.consumer.nlite == 0);
    CHECK(syncs(&c, NULL) == 5);
    fixture_teardown(&c);
    mql_lite_free(&c.consumer);
}

static void a_reconnect_sends_the_set_again(void) {
    mql_client c;
    const char *ab[] = {"a", "b"};
    uint64_t op = 99;
    lite_client(&c);
    mql_lite_sync(&c, SET, ab, 2);
    c.reconnecting = 1;
    CHECK(fixture_reconnect_completes(&c));
    CHECK(c.reconnecting == 0);
    CHECK(syncs(&c, &op) == 2);
    CHECK(op == 0);   /* the client's own: no event for the host */
    fixture_teardown(&c);
    mql_lite_free(&c.consumer);
}

static void a_failed_resync_is_counted_and_posts_no_event(void) {
    mql_client c;
    const char *a[] = {"a"};
    uint64_t op = 99;
    lite_client(&c);
    mql_lite_sync(&c, SET, a, 1);
    take_results(&c, 0);
    c.reconnecting = 1;
    CHECK(fixture_reconnect_completes(&c));
    CHECK(syncs(&c, &op) == 2 && op == 0);
    /* the newest call is the re-sync: the proxy refuses it */
    fixture_finish_call(&c, GRPC_STATUS_UNAVAILABLE, NULL);
    CHECK(take_results(&c, 0) == 0);
    CHECK(errors(&c, "sync_lite", "UNAVAILABLE") == 1);
    fixture_teardown(&c);
    mql_lite_free(&c.consumer);
}

static void the_set_goes_out_again_at_its_period(void) {
    mql_client c;
    const char *a[] = {"a"};
    uint64_t op = 99;
    int64_t now = mql_now_ms(), wake;
    lite_client(&c);
    c.consumer.lite_sync_every_ms = 30000;
    mql_lite_sync(&c, SET, a, 1);
    wake = mql_lite_timers(&c, now, now + 60000);   /* the first pass arms the period */
    CHECK(wake == now + 30000);
    CHECK(syncs(&c, NULL) == 1);
    mql_lite_timers(&c, now + 29999, now + 60000);
    CHECK(syncs(&c, NULL) == 1);
    wake = mql_lite_timers(&c, now + 30000, now + 90000);
    CHECK(syncs(&c, &op) == 2 && op == 0);
    CHECK(wake == now + 60000);
    /* while the session reconnects the settings' arrival sends it instead */
    c.reconnecting = 1;
    mql_lite_timers(&c, now + 60000, now + 120000);
    CHECK(syncs(&c, NULL) == 2);
    fixture_teardown(&c);
    mql_lite_free(&c.consumer);
}

/* Answers the newest SyncLiteSubscription with code (a status of the proxy). */
static void answer_sync(mql_client *c, int code) {
    Apache__Rocketmq__V2__SyncLiteSubscriptionResponse resp =
        APACHE__ROCKETMQ__V2__SYNC_LITE_SUBSCRIPTION_RESPONSE__INIT;
    Apache__Rocketmq__V2__Status st = APACHE__ROCKETMQ__V2__STATUS__INIT;
    st.code = (Apache__Rocketmq__V2__Code)code;
    st.message = code == APACHE__ROCKETMQ__V2__CODE__OK ? "OK" : "refused";
    resp.status = &st;
    fixture_finish_call(c, GRPC_STATUS_OK, &resp.base);
}

/* A subscribe the proxy refused (LITE_SUBSCRIPTION_QUOTA_EXCEEDED past the
 * group's lite.sub.client.quota) was kept all the same and went out in every
 * COMPLETE_ADD after: the host was told it failed, and then the consumer
 * asked for it again on its own every lite_sync_every. As the official
 * clients' LiteSubscriptionManager, the set changes only when the proxy says
 * OK; an unsubscribe that failed leaves the lite topic in the set. */
static void only_what_the_proxy_took_is_kept(void) {
    mql_client c;
    const char *a[] = {"a"}, *b[] = {"b"}, *d[] = {"d"};
    uint64_t op = 99;
    lite_client(&c);
    mql_lite_sync(&c, SET, a, 1);
    answer_sync(&c, APACHE__ROCKETMQ__V2__CODE__OK);
    mql_lite_sync(&c, ADD, b, 1);
    answer_sync(&c, APACHE__ROCKETMQ__V2__CODE__LITE_SUBSCRIPTION_QUOTA_EXCEEDED);
    CHECK(kept(&c, "a") && !kept(&c, "b"));
    mql_lite_sync(&c, ADD, d, 1);
    fixture_finish_call(&c, GRPC_STATUS_DEADLINE_EXCEEDED, NULL);   /* no answer */
    CHECK(!kept(&c, "d"));
    mql_lite_sync(&c, REMOVE, a, 1);
    answer_sync(&c, APACHE__ROCKETMQ__V2__CODE__INTERNAL_SERVER_ERROR);
    CHECK(kept(&c, "a") && c.consumer.nlite == 1);
    take_results(&c, 0);
    mql_lite_resync(&c);
    CHECK(syncs(&c, &op) == 1 && op == 0);
    fixture_teardown(&c);
    mql_lite_free(&c.consumer);
}

static void a_consumer_that_is_not_lite_sends_nothing(void) {
    mql_client c;
    fixture_client_init(&c);
    c.host = "127.0.0.1";
    c.port = 1;
    c.nendpoints = 1;
    mql_backoff_init(&c.reconnect, 200, 10000);
    c.reconnecting = 1;
    CHECK(fixture_reconnect_completes(&c));
    CHECK(syncs(&c, NULL) == 0);
    mql_lite_timers(&c, mql_now_ms() + 3600000, mql_now_ms() + 7200000);
    mql_lite_timers(&c, mql_now_ms() + 7200000, mql_now_ms() + 9000000);
    CHECK(syncs(&c, NULL) == 0);
    fixture_teardown(&c);
}

int main(void) {
    RUN(the_set_asked_for_is_kept);
    RUN(a_reconnect_sends_the_set_again);
    RUN(a_failed_resync_is_counted_and_posts_no_event);
    RUN(the_set_goes_out_again_at_its_period);
    RUN(a_consumer_that_is_not_lite_sends_nothing);
    RUN(only_what_the_proxy_took_is_kept);
    return TEST_REPORT("lite_resync_test");
}
