/* mql_redis_keepalive.c -- the keepalive thread of a Redis client: it renews
 * the registered locks on a link of its own (never behind the command queue),
 * earliest deadline first (a heap), every renewal due at once in one
 * pipelined round trip (under Cluster, one a node, all nodes' at once), and
 * posts MQL_EV_LOCK_LOST when a renewal proves a lock gone, its TTL runs out
 * unrenewed or its budget (max) is spent. Its state lives in struct mql_redis
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

static int is_noscript(const redisReply *reply) {
    return reply && reply->type == REDIS_REPLY_ERROR && strncmp(reply->str, "NOSCRIPT", 8) == 0;
}

/* The server lacked the renewal script (a restart, a failover, SCRIPT FLUSH):
 * NOSCRIPT proves those renewals did not run, so they run again, together,
 * as EVAL with the script's text (their argv[i] and lens[i] rewritten). */
static void rerun_noscript(mql_redis *r, const char *argv[][6], size_t lens[][6], int n,
                           redisReply **replies, mql_result *res) {
    mql_redis_argv again[PIPELINE_MAX];
    redisReply *again_replies[PIPELINE_MAX];
    mql_result again_res[PIPELINE_MAX];
    int idx[PIPELINE_MAX], m = 0, i;
    for (i = 0; i < n; i++) {
        if (!is_noscript(replies[i])) continue;
        freeReplyObject(replies[i]);
        replies[i] = NULL;
        argv[i][0] = "EVAL";
        lens[i][0] = 4;
        argv[i][1] = RENEW_SCRIPT;
        lens[i][1] = strlen(RENEW_SCRIPT);
        again[m] = (mql_redis_argv){6, argv[i], lens[i], 3};
        idx[m++] = i;
    }
    if (!m) return;
    mql_redis_link_run_parallel(r->ka_link, m, again, again_replies, again_res);
    for (i = 0; i < m; i++) {
        replies[idx[i]] = again_replies[i];
        res[idx[i]] = again_res[i];
    }
}

/* The renewals of n due keepalives (n <= PIPELINE_MAX) over the keepalive
 * link, with the mutex dropped: one round trip for the lot on one server,
 * and under Cluster one for each node's, all nodes' at once, so a node that
 * never answers costs the round one timeout and delays no renewal sent to
 * another (mql_redis_link_run_parallel). The records are marked busy, so no
 * stop frees them meanwhile. outcome[i] is due[i]'s. */
static void renew_locks(mql_redis *r, keepalive *const *due, int n, int *outcome) {
    char ttl[PIPELINE_MAX][24];
    const char *argv[PIPELINE_MAX][6];
    size_t lens[PIPELINE_MAX][6];
    mql_redis_argv av[PIPELINE_MAX] = {{0}};   /* only n are used; gcc cannot tell */
    redisReply *replies[PIPELINE_MAX];
    mql_result res[PIPELINE_MAX];
    size_t sha_len = strlen(r->renew_sha);
    int i;
    for (i = 0; i < n; i++) {
        const keepalive *k = due[i];
        snprintf(ttl[i], sizeof(ttl[i]), "%lld", (long long)k->ttl_ms);
        argv[i][0] = "EVALSHA";
        argv[i][1] = r->renew_sha;
        argv[i][2] = "1";
        argv[i][3] = k->key;
        argv[i][4] = k->owner;
        argv[i][5] = ttl[i];
        lens[i][0] = 7;
        lens[i][1] = sha_len;
        lens[i][2] = 1;
        /* the key and the owner by their lengths: a NUL in either is theirs */
        lens[i][3] = k->key_len;
        lens[i][4] = k->owner_len;
        lens[i][5] = strlen(ttl[i]);
        av[i] = (mql_redis_argv){6, argv[i], lens[i], 3};
    }
    mql_redis_link_run_parallel(r->ka_link, n, av, replies, res);
    rerun_noscript(r, argv, lens, n, replies, res);
    for (i = 0; i < n; i++) {
        outcome[i] = replies[i] ? renewal_outcome(replies[i]) : RENEW_RETRY;
        if (replies[i]) freeReplyObject(replies[i]);
    }
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

/* ------------------------------------------------------------ due heap */

/* The heap holds the active keepalives not being renewed, by next_at, each
 * knowing its place (heap_at), so a stop takes it out in O(log n). */

static void heap_place(mql_redis *r, size_t i, keepalive *k) {
    r->ka_heap[i] = k;
    k->heap_at = i;
}

static void heap_up(mql_redis *r, size_t i) {
    keepalive *k = r->ka_heap[i];
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (r->ka_heap[parent]->next_at <= k->next_at) break;
        heap_place(r, i, r->ka_heap[parent]);
        i = parent;
    }
    heap_place(r, i, k);
}

static void heap_down(mql_redis *r, size_t i) {
    keepalive *k = r->ka_heap[i];
    size_t n = r->ka_heap_len;
    for (;;) {
        size_t child = 2 * i + 1;
        if (child >= n) break;
        if (child + 1 < n && r->ka_heap[child + 1]->next_at < r->ka_heap[child]->next_at) child++;
        if (r->ka_heap[child]->next_at >= k->next_at) break;
        heap_place(r, i, r->ka_heap[child]);
        i = child;
    }
    heap_place(r, i, k);
}

/* Adds k, waiting for its next_at (mutex held). */
static void heap_push(mql_redis *r, keepalive *k) {
    if (r->ka_heap_len == r->ka_heap_cap) {
        size_t cap = r->ka_heap_cap ? r->ka_heap_cap * 2 : 64;
        keepalive **heap = mql_xcalloc(cap, sizeof(*heap));
        if (r->ka_heap_len) memcpy(heap, r->ka_heap, r->ka_heap_len * sizeof(*heap));
        free(r->ka_heap);
        r->ka_heap = heap;
        r->ka_heap_cap = cap;
    }
    r->ka_heap[r->ka_heap_len++] = k;
    heap_up(r, r->ka_heap_len - 1);
}

/* Takes k off the heap, if it is there (mutex held). */
static void heap_remove(mql_redis *r, keepalive *k) {
    size_t i = k->heap_at;
    keepalive *last;
    if (i == KA_NOT_DUE) return;
    k->heap_at = KA_NOT_DUE;
    last = r->ka_heap[--r->ka_heap_len];
    if (last == k) return;
    heap_place(r, i, last);
    /* the moved one may belong above its new place or below it */
    if (i > 0 && r->ka_heap[(i - 1) / 2]->next_at > last->next_at) heap_up(r, i);
    else heap_down(r, i);
}

/* The keepalive due first, or NULL (mutex held). */
static keepalive *heap_first(const mql_redis *r) {
    return r->ka_heap_len ? r->ka_heap[0] : NULL;
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

/* Takes off the heap the keepalives due by now, up to PIPELINE_MAX, earliest
 * first, into due[] and marks them busy; one whose budget (max_hold) is spent
 * is renewed no more: the lock lapses within its TTL while the handler may
 * still run, so that is said now, as for a lock proven lost, and the holder
 * must not count on it (mutex held). Returns how many are due. */
static int take_due(mql_redis *r, int64_t now, keepalive **due) {
    int n = 0;
    keepalive *k;
    while (n < PIPELINE_MAX && (k = heap_first(r)) && k->next_at <= now) {
        heap_remove(r, k);
        if (now >= k->until) {
            k->state = KA_SPENT;
            if (!k->cancelled) post_lock_lost(r, k->id);
            continue;
        }
        k->busy = 1;
        due[n++] = k;
    }
    return n;
}

void *mql_redis_ka_thread_main(void *arg) {
    mql_redis *r = arg;
    keepalive *due[PIPELINE_MAX];
    int outcome[PIPELINE_MAX];
    pthread_mutex_lock(&r->mu);
    while (!r->stopping) {
        keepalive *first = heap_first(r);
        int64_t now = mql_now_ms();
        int n, i;
        if (!first || first->next_at > now) {
            r->ka_wake_at = first ? first->next_at : INT64_MAX;
            mql_redis_wait_until(&r->ka_cond, &r->mu, r->ka_wake_at);
            r->ka_wake_at = INT64_MIN;
            continue;
        }
        n = take_due(r, now, due);
        if (!n) continue;
        pthread_mutex_unlock(&r->mu);
        renew_locks(r, due, n, outcome);
        pthread_mutex_lock(&r->mu);
        for (i = 0; i < n; i++) {
            keepalive *k = due[i];
            k->busy = 0;
            apply_renewal(r, k, outcome[i], now);
            if (k->cancelled) {
                unlink_keepalive(r, k);
                mql_redis_keepalive_free(k);
            } else if (k->state == KA_ACTIVE) {
                heap_push(r, k);
            }
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
    heap_push(r, k);
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
            heap_remove(r, k);
            unlink_at(r, k, slot);
            mql_redis_keepalive_free(k);
        }
    }
    pthread_mutex_unlock(&r->mu);
    return lost;
}
