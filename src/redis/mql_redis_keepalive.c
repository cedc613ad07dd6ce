/* mql_redis_keepalive.c -- the keepalive thread of a Redis client: it renews
 * the registered locks on a link of its own (never behind the command queue),
 * earliest deadline first, and posts MQL_EV_LOCK_LOST when a renewal proves a
 * lock gone, its TTL runs out unrenewed or its budget (max) is spent. Its state lives in struct mql_redis
 * (mql_redis_private.h) under the client's mutex.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mql_redis_private.h"

/* ------------------------------------------------------------ keepalives */

void mql_redis_keepalive_free(keepalive *k) {
    free(k->key);
    free(k->owner);
    free(k);
}

enum { RENEW_KEPT, RENEW_RETRY, RENEW_LOST };

/* What a renewal's reply proves. The script answers 1 (renewed) or 0 (the key
 * is gone or another owner's): only that 0 proves the lock lost. An error
 * reply proves nothing about the key: BUSY (a script runs past
 * busy-reply-threshold), LOADING (a restart reads its dataset), MASTERDOWN,
 * CLUSTERDOWN or a READONLY after a failover all leave a key that may still be
 * ours and still counting down its TTL, so they are retried like a lost
 * connection while that TTL allows. */
static int renewal_outcome(const redisReply *reply) {
    if (reply->type != REDIS_REPLY_INTEGER) return RENEW_RETRY;
    return reply->integer == 1 ? RENEW_KEPT : reply->integer == 0 ? RENEW_LOST : RENEW_RETRY;
}

/* One renewal over the keepalive link, with the mutex dropped. */
static int renew_lock(mql_redis *r, const char *key, const char *owner, int64_t ttl_ms) {
    char ttl[24];
    char *argv[6];
    size_t lens[6];
    mql_result res;
    redisReply *reply;
    int outcome;
    snprintf(ttl, sizeof(ttl), "%lld", (long long)ttl_ms);
    argv[0] = "EVALSHA";
    argv[1] = r->renew_sha;
    argv[2] = "1";
    argv[3] = (char *)key;
    argv[4] = (char *)owner;
    argv[5] = ttl;
    for (int i = 0; i < 6; i++) lens[i] = strlen(argv[i]);
    reply = mql_redis_run(r->ka_link, 6, argv, lens, RENEW_SCRIPT, &res);
    if (!reply) return RENEW_RETRY;
    outcome = renewal_outcome(reply);
    freeReplyObject(reply);
    return outcome;
}

static void post_lock_lost(mql_redis *r, uint64_t id) {
    mql_event *ev = mql_event_new(MQL_EV_LOCK_LOST, 0);
    ev->keepalive_id = id;
    mql_events_push(&r->events, ev);
}

/* Applies a renewal's outcome (mutex held); started is when it was sent. */
static void apply_renewal(mql_redis *r, keepalive *k, int outcome, int64_t started) {
    int64_t now = mql_now_ms();
    if (outcome == RENEW_KEPT) {
        k->last_ok = started;    /* the new TTL counts from no later than the send */
        k->next_at = started + k->every_ms;
        return;
    }
    if (outcome == RENEW_RETRY && now - k->last_ok < k->ttl_ms) {
        /* unreachable or refused: try again soon, while the key may still be ours */
        k->next_at = now + (k->every_ms < 500 ? k->every_ms : 500);
        return;
    }
    k->state = KA_LOST;
    if (!k->cancelled) post_lock_lost(r, k->id);
}

/* The active, idle keepalive with the earliest deadline (mutex held). */
static keepalive *earliest(const mql_redis *r) {
    keepalive *k, *best = NULL;
    for (k = r->alive; k; k = k->next)
        if (k->state == KA_ACTIVE && !k->busy && (!best || k->next_at < best->next_at)) best = k;
    return best;
}

static void unlink_keepalive(mql_redis *r, keepalive *k) {
    keepalive **pp;
    for (pp = &r->alive; *pp != k; pp = &(*pp)->next) {
    }
    *pp = k->next;
}

void *mql_redis_ka_thread_main(void *arg) {
    mql_redis *r = arg;
    pthread_mutex_lock(&r->mu);
    while (!r->stopping) {
        keepalive *k = earliest(r);
        int64_t now = mql_now_ms();
        int outcome;
        if (!k || k->next_at > now) {
            r->ka_wake_at = k ? k->next_at : INT64_MAX;
            mql_redis_wait_until(&r->ka_cond, &r->mu, r->ka_wake_at);
            r->ka_wake_at = INT64_MIN;
            continue;
        }
        if (now >= k->until) {
            /* Its budget (max_hold) is spent: no more renewals, so the lock
             * lapses within its TTL while the handler may still run. Say so
             * now, as for a lock proven lost: the holder must not count on it. */
            k->state = KA_SPENT;
            if (!k->cancelled) post_lock_lost(r, k->id);
            continue;
        }
        k->busy = 1;
        pthread_mutex_unlock(&r->mu);
        outcome = renew_lock(r, k->key, k->owner, k->ttl_ms);
        pthread_mutex_lock(&r->mu);
        k->busy = 0;
        apply_renewal(r, k, outcome, now);
        if (k->cancelled) {
            unlink_keepalive(r, k);
            mql_redis_keepalive_free(k);
        }
    }
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

/* ------------------------------------------------------------ public */

uint64_t mql_redis_keepalive(mql_redis *r, const char *key, const char *owner, int64_t ttl_ms,
                             int64_t every_ms, int64_t max_ms, int64_t since_ms) {
    keepalive *k = mql_xcalloc(1, sizeof(*k));
    int64_t now = mql_now_ms();
    /* the key's TTL started when its acquire was sent, however late this call
     * comes; a time from the future is no acquire of ours, so it counts as now */
    int64_t since = since_ms > 0 && since_ms < now ? since_ms : now;
    uint64_t id;
    k->key = mql_strdup(key);
    k->owner = mql_strdup(owner);
    k->ttl_ms = ttl_ms;
    k->every_ms = every_ms > 0 ? every_ms : ttl_ms / 3;
    k->next_at = since + k->every_ms;   /* already due when registered late */
    k->until = max_ms > 0 ? since + max_ms : INT64_MAX;
    k->last_ok = since;
    pthread_mutex_lock(&r->mu);
    id = k->id = ++r->next_op;
    k->next = r->alive;
    r->alive = k;
    if (k->next_at < r->ka_wake_at) pthread_cond_signal(&r->ka_cond);
    pthread_mutex_unlock(&r->mu);
    return id;
}

/* The keepalive of id (mutex held), or NULL. */
static keepalive *find_keepalive(mql_redis *r, uint64_t id) {
    keepalive *k;
    for (k = r->alive; k && k->id != id; k = k->next) {
    }
    return k;
}

/* Lost: a renewal said so, its budget is spent, or the TTL ran out since the
 * last good renewal (mutex held). */
static int keepalive_is_lost(const keepalive *k) {
    return k->state == KA_LOST || k->state == KA_SPENT || mql_now_ms() - k->last_ok >= k->ttl_ms;
}

int mql_redis_keepalive_lost(mql_redis *r, uint64_t id) {
    keepalive *k;
    int lost = 0;
    pthread_mutex_lock(&r->mu);
    k = find_keepalive(r, id);
    if (k && !k->cancelled) lost = keepalive_is_lost(k);
    pthread_mutex_unlock(&r->mu);
    return lost;
}

int mql_redis_keepalive_stop(mql_redis *r, uint64_t id) {
    keepalive *k;
    int lost = 0;
    pthread_mutex_lock(&r->mu);
    k = find_keepalive(r, id);
    if (k) {
        lost = keepalive_is_lost(k);
        if (k->busy) {
            k->cancelled = 1;   /* the thread frees it when the renewal returns */
        } else {
            unlink_keepalive(r, k);
            mql_redis_keepalive_free(k);
        }
    }
    pthread_mutex_unlock(&r->mu);
    return lost;
}
