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
    free(k);   /* key and owner are in the same block */
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
static int renew_lock(mql_redis *r, const keepalive *k) {
    char ttl[24];
    char *argv[6];
    size_t lens[6];
    mql_result res;
    redisReply *reply;
    int outcome;
    snprintf(ttl, sizeof(ttl), "%lld", (long long)k->ttl_ms);
    argv[0] = "EVALSHA";
    argv[1] = r->renew_sha;
    argv[2] = "1";
    argv[3] = k->key;
    argv[4] = k->owner;
    argv[5] = ttl;
    lens[0] = 7;
    lens[1] = strlen(r->renew_sha);
    lens[2] = 1;
    /* the key and the owner by their lengths: a NUL in either is theirs */
    lens[3] = k->key_len;
    lens[4] = k->owner_len;
    lens[5] = strlen(ttl);
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

/* ------------------------------------------------------------ index by id */

static size_t home_slot(uint64_t id, size_t cap) {
    return (size_t)((id * 0x9E3779B97F4A7C15ull) >> 32) & (cap - 1);
}

static void index_put(keepalive **slots, size_t cap, keepalive *k) {
    size_t i = home_slot(k->id, cap);
    while (slots[i]) i = (i + 1) & (cap - 1);
    slots[i] = k;
}

/* Adds k, growing the table to keep it at most half full (mutex held). */
static void index_add(mql_redis *r, keepalive *k) {
    if ((r->ka_count + 1) * 2 > r->ka_cap) {
        size_t cap = r->ka_cap ? r->ka_cap * 2 : 64, i;
        keepalive **slots = mql_xcalloc(cap, sizeof(*slots));
        for (i = 0; i < r->ka_cap; i++)
            if (r->ka_index[i]) index_put(slots, cap, r->ka_index[i]);
        free(r->ka_index);
        r->ka_index = slots;
        r->ka_cap = cap;
    }
    index_put(r->ka_index, r->ka_cap, k);
    r->ka_count++;
}

/* The slot of id, or -1 (mutex held). */
static long index_find(const mql_redis *r, uint64_t id) {
    size_t i;
    if (!r->ka_cap) return -1;
    for (i = home_slot(id, r->ka_cap); r->ka_index[i]; i = (i + 1) & (r->ka_cap - 1))
        if (r->ka_index[i]->id == id) return (long)i;
    return -1;
}

/* Empties slot i, moving back the entries after it that probed past it, so
 * that no search stops short at the hole (mutex held). */
static void index_remove_at(mql_redis *r, size_t i) {
    size_t mask = r->ka_cap - 1, j;
    r->ka_index[i] = NULL;
    r->ka_count--;
    for (j = (i + 1) & mask; r->ka_index[j]; j = (j + 1) & mask) {
        size_t home = home_slot(r->ka_index[j]->id, r->ka_cap);
        /* the entry at j may fill i unless its home lies cyclically in (i, j] */
        int stays = i <= j ? (home > i && home <= j) : (home > i || home <= j);
        if (!stays) {
            r->ka_index[i] = r->ka_index[j];
            r->ka_index[j] = NULL;
            i = j;
        }
    }
}

/* Takes k, found at slot of the index (-1: not there), off the index and
 * the list (mutex held). */
static void unlink_at(mql_redis *r, keepalive *k, long slot) {
    if (slot >= 0) index_remove_at(r, (size_t)slot);
    if (k->prev) k->prev->next = k->next;
    else r->alive = k->next;
    if (k->next) k->next->prev = k->prev;
}

static void unlink_keepalive(mql_redis *r, keepalive *k) {
    unlink_at(r, k, index_find(r, k->id));
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
        outcome = renew_lock(r, k);
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

uint64_t mql_redis_keepalive(mql_redis *r, const char *key, size_t key_len, const char *owner,
                             size_t owner_len, int64_t ttl_ms, int64_t every_ms, int64_t max_ms,
                             int64_t since_ms) {
    /* one block for the record, its key and its owner: one per message under
     * the exactly-once policy, made here and freed at its stop */
    keepalive *k = mql_xcalloc(1, sizeof(*k) + key_len + owner_len + 2);
    int64_t now = mql_now_ms();
    /* the key's TTL started when its acquire was sent, however late this call
     * comes; a time from the future is no acquire of ours, so it counts as now */
    int64_t since = since_ms > 0 && since_ms < now ? since_ms : now;
    uint64_t id;
    k->key = (char *)(k + 1);
    memcpy(k->key, key, key_len);   /* calloc'd: each ends in a NUL for the logs */
    k->key_len = key_len;
    k->owner = k->key + key_len + 1;
    memcpy(k->owner, owner, owner_len);
    k->owner_len = owner_len;
    k->ttl_ms = ttl_ms;
    k->every_ms = every_ms > 0 ? every_ms : ttl_ms / 3;
    k->next_at = since + k->every_ms;   /* already due when registered late */
    k->until = max_ms > 0 ? since + max_ms : INT64_MAX;
    k->last_ok = since;
    pthread_mutex_lock(&r->mu);
    id = k->id = ++r->next_op;
    k->next = r->alive;
    if (r->alive) r->alive->prev = k;
    r->alive = k;
    index_add(r, k);
    if (k->next_at < r->ka_wake_at) pthread_cond_signal(&r->ka_cond);
    pthread_mutex_unlock(&r->mu);
    return id;
}

/* The keepalive of id (mutex held), or NULL. */
static keepalive *find_keepalive(mql_redis *r, uint64_t id) {
    long slot = index_find(r, id);
    return slot >= 0 ? r->ka_index[slot] : NULL;
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
    long slot;
    pthread_mutex_lock(&r->mu);
    slot = index_find(r, id);   /* once: the unlink below reuses it */
    k = slot >= 0 ? r->ka_index[slot] : NULL;
    if (k) {
        lost = keepalive_is_lost(k);
        if (k->busy) {
            k->cancelled = 1;   /* the thread frees it when the renewal returns */
        } else {
            unlink_at(r, k, slot);
            mql_redis_keepalive_free(k);
        }
    }
    pthread_mutex_unlock(&r->mu);
    return lost;
}
