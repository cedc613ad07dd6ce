/* mql_lease.c -- lease table: hash by id plus a min-heap of timers (see mql_lease.h). */
#include "mql_lease.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "mql.h"

#define HEAP_ARITY 4
#define HEAP_PAD 3   /* (HEAP_PAD + 1) slots of 16 bytes: the first child line starts aligned */

const char *mql_lease_state_name(mql_lease_state s) {
    switch (s) {
    case MQL_LEASE_HELD: return "held";
    case MQL_LEASE_RENEWING: return "renewing";
    case MQL_LEASE_EXPIRING: return "expiring";
    case MQL_LEASE_LOST: return "lost";
    case MQL_LEASE_ACKED: return "acked";
    case MQL_LEASE_NACKED: return "nacked";
    }
    return "unknown";
}

void mql_lease_table_init(mql_lease_table *t) {
    memset(t, 0, sizeof(*t));
    t->nbuckets = 64;
    t->buckets = mql_xcalloc(t->nbuckets, sizeof(*t->buckets));
    t->next_id = 1;
}

/* Where the handle lives when it fits: right after the message id. */
static char *handle_room(mql_lease *l) {
    return l->message_id + strlen(l->message_id) + 1;
}

static int handle_inline(mql_lease *l) {
    return l->handle == handle_room(l);
}

static void lease_free(mql_lease *l) {
    if (!handle_inline(l)) free(l->handle);
    free(l);
}

void mql_lease_table_free(mql_lease_table *t) {
    size_t i;
    for (i = 0; i < t->nbuckets; i++) {
        mql_lease *l = t->buckets[i], *next;
        for (; l; l = next) {
            next = l->hnext;
            lease_free(l);
        }
    }
    for (i = 0; i < t->ntopics; i++) free(t->topics[i]);
    free(t->topics);
    free(t->topic_slots);
    free(t->buckets);
    if (t->heap) free(t->heap - HEAP_PAD);
    memset(t, 0, sizeof(*t));
}

static size_t bucket_of(const mql_lease_table *t, uint64_t id) {
    /* ids are sequential; a multiplicative hash spreads them anyway */
    return (size_t)((id * 0x9E3779B97F4A7C15ULL) >> 20) & (t->nbuckets - 1);
}

static void table_grow(mql_lease_table *t) {
    size_t i, old_n = t->nbuckets;
    mql_lease **old = t->buckets;
    t->nbuckets *= 2;
    t->buckets = mql_xcalloc(t->nbuckets, sizeof(*t->buckets));
    for (i = 0; i < old_n; i++) {
        mql_lease *l = old[i], *next;
        for (; l; l = next) {
            size_t b = bucket_of(t, l->id);
            next = l->hnext;
            l->hnext = t->buckets[b];
            t->buckets[b] = l;
        }
    }
    free(old);
}

/* ---- interned topics ----
 *
 * Every lease names its topic in each renewal, ack and nack, so the name is
 * looked up once per received message: a hash of the names (FNV-1a, linear
 * probing) finds it without comparing against every other name. The names
 * come from the proxy and are never freed before the table, so at most
 * MQL_TOPICS_MAX are shared; a lease of any further topic keeps its own copy
 * rather than another topic's name or none: the proxy resolves the receipt
 * handle against the request's topic (AckMessageActivity and
 * ChangeInvisibleDurationActivity in rocketmq-proxy), so a wrong name would
 * fail the ack, and a copy costs only the leases of a proxy that misbehaves. */

static uint64_t topic_hash(const char *s) {
    uint64_t h = 0xcbf29ce484222325ULL;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3ULL;
    return h;
}

/* The slot that holds topic, or the empty slot where it would go. */
static size_t topic_slot(const mql_lease_table *t, const char *topic) {
    size_t mask = t->ntopic_slots - 1, i = (size_t)topic_hash(topic) & mask;
    while (t->topic_slots[i] && strcmp(t->topics[t->topic_slots[i] - 1], topic) != 0)
        i = (i + 1) & mask;
    return i;
}

/* Doubles the slots (from 16), keeping them at most half full. */
static void topics_grow(mql_lease_table *t) {
    size_t i;
    t->ntopic_slots = t->ntopic_slots ? t->ntopic_slots * 2 : 16;
    free(t->topic_slots);
    t->topic_slots = mql_xcalloc(t->ntopic_slots, sizeof(*t->topic_slots));
    for (i = 0; i < t->ntopics; i++)
        t->topic_slots[topic_slot(t, t->topics[i])] = (uint16_t)(i + 1);
}

/* The index of topic among the interned ones, added if new while there is
 * room; MQL_TOPIC_OWN when there is none. */
static uint16_t topic_intern(mql_lease_table *t, const char *topic) {
    size_t slot;
    if (t->ntopic_slots == 0) topics_grow(t);
    slot = topic_slot(t, topic);
    if (t->topic_slots[slot]) return (uint16_t)(t->topic_slots[slot] - 1);
    if (t->ntopics == MQL_TOPICS_MAX) return MQL_TOPIC_OWN;
    if (!t->topics) t->topics = mql_xcalloc(MQL_TOPICS_MAX, sizeof(*t->topics));
    t->topics[t->ntopics] = mql_strdup(topic);
    t->topic_slots[slot] = (uint16_t)(t->ntopics + 1);
    t->ntopics++;
    if (2 * t->ntopics > t->ntopic_slots) topics_grow(t);
    return (uint16_t)(t->ntopics - 1);
}

/* Where a lease's own copy of its topic lies: after the handle's room. */
static char *own_topic(const mql_lease *l) {
    return (char *)l->message_id + strlen(l->message_id) + 1 + l->handle_room;
}

const char *mql_lease_topic(const mql_lease_table *t, const mql_lease *l) {
    return l->topic == MQL_TOPIC_OWN ? own_topic(l) : t->topics[l->topic];
}

size_t mql_lease_alloc_size(size_t id_len, size_t handle_len) {
    /* offsetof, not sizeof: the id starts in the struct's tail padding */
    return offsetof(mql_lease, message_id) + id_len + 1 + handle_len + 1 + MQL_HANDLE_SLACK;
}

mql_lease *mql_lease_add(mql_lease_table *t, const char *message_id, const char *topic,
                         const char *handle, int64_t now_ms, int64_t invisible_ms) {
    size_t idlen = strlen(message_id ? message_id : "");
    size_t hlen = strlen(handle ? handle : "");
    uint16_t topic_index;
    size_t own_len;
    mql_lease *l;
    size_t b;
    if (!topic) topic = "";
    topic_index = topic_intern(t, topic);
    own_len = topic_index == MQL_TOPIC_OWN ? strlen(topic) + 1 : 0;
    /* a handle longer than the room's counter can say is simply kept apart */
    if (hlen + 1 + MQL_HANDLE_SLACK > UINT16_MAX) hlen = 0;
    l = mql_xcalloc(1, mql_lease_alloc_size(idlen, hlen) + own_len);
    if (t->count + 1 > 2 * t->nbuckets) table_grow(t);   /* chains of two on average */
    l->id = t->next_id++;
    memcpy(l->message_id, message_id ? message_id : "", idlen + 1);
    l->topic = topic_index;
    l->handle_room = (uint16_t)(hlen + 1 + MQL_HANDLE_SLACK);
    if (own_len) memcpy(own_topic(l), topic, own_len);
    l->handle = handle_room(l);
    mql_lease_set_handle(l, handle ? handle : "");
    l->state = MQL_LEASE_HELD;
    l->acquired_ms = now_ms;
    l->deadline_ms = now_ms + invisible_ms;
    l->window_ms = (uint32_t)invisible_ms;
    l->heap_index = MQL_HEAP_NONE;
    b = bucket_of(t, l->id);
    l->hnext = t->buckets[b];
    t->buckets[b] = l;
    t->count++;
    return l;
}

mql_lease *mql_lease_find(const mql_lease_table *t, uint64_t id) {
    mql_lease *l = t->buckets[bucket_of(t, id)];
    while (l && l->id != id) l = l->hnext;
    return l;
}

void mql_lease_set_handle(mql_lease *l, const char *handle) {
    size_t len = strlen(handle);
    if (len < l->handle_room) {
        if (!handle_inline(l)) free(l->handle);
        l->handle = handle_room(l);
        memmove(l->handle, handle, len + 1);   /* handle may be l->handle itself */
        return;
    }
    if (!handle_inline(l)) free(l->handle);
    l->handle = mql_strdup(handle);
}

void mql_lease_take_handle(mql_lease *l, char *handle) {
    if (strlen(handle) < l->handle_room) {
        mql_lease_set_handle(l, handle);
        free(handle);
        return;
    }
    if (!handle_inline(l)) free(l->handle);
    l->handle = handle;
}

/* ---- timer heap ----
 *
 * A 4-ary min-heap ordered by (timer, id), so ties are stable. Each slot
 * carries its own key (mql_heap_key: the timer, then the id's low bits): a
 * sift compares slots without touching the leases (at a million leases each
 * lease record is a cache miss; a binary heap's pop compared two of them on
 * each of its 20 levels, and until the id went into the key every tie did,
 * which renewals at a phase of whole milliseconds make common). Four
 * children per node halve the levels; the children of slot i are slots
 * 4i+1 .. 4i+4, 64 bytes that start on a cache line because the array is
 * allocated aligned and offset by HEAP_PAD slots. A lease still learns its
 * slot (heap_index), so that disarming any lease stays O(log n). */


static int slot_less(const mql_heap_slot *a, const mql_heap_slot *b) {
    return a->key < b->key;
}

static void heap_place(mql_lease_table *t, size_t i, mql_heap_slot s) {
    t->heap[i] = s;
    s.lease->heap_index = (uint32_t)i;
}

static void heap_up(mql_lease_table *t, size_t i) {
    mql_heap_slot s = t->heap[i];
    while (i > 0) {
        size_t parent = (i - 1) / HEAP_ARITY;
        if (!slot_less(&s, &t->heap[parent])) break;
        heap_place(t, i, t->heap[parent]);
        i = parent;
    }
    heap_place(t, i, s);
}

static void heap_down(mql_lease_table *t, size_t i) {
    mql_heap_slot s = t->heap[i];
    for (;;) {
        size_t first = HEAP_ARITY * i + 1, last = first + HEAP_ARITY, c, best;
        if (first >= t->heap_len) break;
        if (last > t->heap_len) last = t->heap_len;
        best = first;
        for (c = first + 1; c < last; c++)
            if (slot_less(&t->heap[c], &t->heap[best])) best = c;
        if (!slot_less(&t->heap[best], &s)) break;
        heap_place(t, i, t->heap[best]);
        i = best;
    }
    heap_place(t, i, s);
}

static void heap_reserve(mql_lease_table *t) {
    mql_heap_slot *base, *old_base = t->heap ? t->heap - HEAP_PAD : NULL;
    uint32_t cap = t->heap_cap ? t->heap_cap * 2 : 64;
    size_t bytes = ((size_t)cap + HEAP_PAD) * sizeof(*base);
    if (posix_memalign((void **)&base, 64, bytes) != 0) abort();
    if (t->heap_len) memcpy(base + HEAP_PAD, t->heap, t->heap_len * sizeof(*base));
    free(old_base);
    t->heap = base + HEAP_PAD;
    t->heap_cap = cap;
}

void mql_lease_disarm(mql_lease_table *t, mql_lease *l) {
    uint32_t i = l->heap_index;
    mql_heap_slot last;
    if (i == MQL_HEAP_NONE) return;
    l->heap_index = MQL_HEAP_NONE;
    last = t->heap[--t->heap_len];
    if (i == t->heap_len) return;
    heap_place(t, i, last);
    heap_up(t, i);
    heap_down(t, last.lease->heap_index);
}

void mql_lease_arm(mql_lease_table *t, mql_lease *l, int64_t when_ms) {
    mql_heap_slot s;
    mql_lease_disarm(t, l);   /* re-arming is delete-then-insert */
    if (t->heap_len == t->heap_cap) heap_reserve(t);
    l->timer_ms = when_ms;
    s.key = mql_heap_key(when_ms, l->id);
    s.lease = l;
    heap_place(t, t->heap_len++, s);
    heap_up(t, l->heap_index);
}

mql_lease *mql_lease_next(const mql_lease_table *t) {
    return t->heap_len ? t->heap[0].lease : NULL;
}

void mql_lease_remove(mql_lease_table *t, mql_lease *l) {
    mql_lease **pp = &t->buckets[bucket_of(t, l->id)];
    mql_lease_disarm(t, l);
    while (*pp && *pp != l) pp = &(*pp)->hnext;
    if (*pp) {
        *pp = l->hnext;
        t->count--;
    }
    lease_free(l);
}

void mql_lease_each(mql_lease_table *t, void (*fn)(mql_lease *, void *), void *ud) {
    size_t i;
    for (i = 0; i < t->nbuckets; i++) {
        mql_lease *l = t->buckets[i], *next;
        for (; l; l = next) {
            next = l->hnext;
            fn(l, ud);
        }
    }
}
