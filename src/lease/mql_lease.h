/* mql_lease.h -- the lease table: one entry per message the consumer holds.
 *
 * A received message is a lease on the broker's invisibility window. The
 * entry keeps what renewing and releasing need: the *latest* receipt handle
 * (every successful ChangeInvisibleDuration mints a new one and the old one
 * must never be used again), the deadline after which the broker gives the
 * message to someone else, and the budget already spent.
 *
 * Entries are found by id through a chained hash table and ordered by their
 * next timer (a renewal, or the check that the deadline has passed) in a
 * 4-ary min-heap, so the core's thread sleeps exactly until the next thing
 * to do: O(1) lookup, O(log n) re-arm, O(1) peek. A timer wheel would make
 * re-arming O(1) but needs a tick; with a few thousand leases the heap is
 * cheaper than the wake-ups a tick costs.
 *
 * A lease is held by the million, so its record is one allocation: the
 * fixed fields, then the message id and room for the receipt handle, which
 * every renewal replaces. The room is the first handle's length plus
 * MQL_HANDLE_SLACK, so a new handle a few digits longer (a counter or a
 * duration in it grew) is still copied in place: no allocation per lease for
 * the handle, and none per renewal. Only a handle that outgrows the room gets
 * an allocation of its own (handle then points outside the record).
 *
 * The table is not thread-safe: the client's mutex guards it.
 */
#ifndef MQL_LEASE_H
#define MQL_LEASE_H

#include <stddef.h>
#include <stdint.h>

typedef enum mql_lease_state {
    MQL_LEASE_HELD = 1,   /* deadline ahead, renewal armed */
    MQL_LEASE_RENEWING,   /* a ChangeInvisibleDuration is in flight */
    MQL_LEASE_EXPIRING,   /* no more renewals (budget spent, or let go on purpose) */
    MQL_LEASE_LOST,       /* deadline passed while held, or the handle was rejected */
    MQL_LEASE_ACKED,      /* final: acknowledged */
    MQL_LEASE_NACKED      /* final: given back early (nack) */
} mql_lease_state;

const char *mql_lease_state_name(mql_lease_state s);

/* What the host asked for while a renewal was in flight; done when it returns. */
typedef enum mql_lease_pending {
    MQL_PENDING_NONE = 0,
    MQL_PENDING_ACK,
    MQL_PENDING_NACK
} mql_lease_pending;

#define MQL_HEAP_NONE UINT32_MAX
#define MQL_HANDLE_SLACK 8   /* bytes of room past the first handle (see above) */

/* Topic names are chosen by the proxy, so the table shares at most
 * MQL_TOPICS_MAX of them (a consumer subscribes to one topic; its messages
 * carry one or a few names). A lease of a topic past the cap keeps its own
 * copy of the name in its record, after the handle's room, and says so with
 * MQL_TOPIC_OWN as its topic index. */
#define MQL_TOPICS_MAX 1024
#define MQL_TOPIC_OWN UINT16_MAX

/* The fixed fields are ordered and sized so that no byte is padding: a
 * million leases pay for every one (times a lease needs past its receive are
 * kept as 32-bit offsets from acquired_ms, and the topic as an index). */
typedef struct mql_lease {
    uint64_t id;               /* table key, never reused within a client */
    char *handle;              /* the latest receipt handle; the only one ever sent: in
                                  text (inline) or, once one outgrew it, allocated */
    int64_t acquired_ms;       /* monotonic: when the receive returned it */
    int64_t deadline_ms;       /* monotonic: when the broker will redeliver */
    int64_t timer_ms;          /* monotonic: next renewal or deadline check */
    struct mql_lease *hnext;   /* hash chain */
    uint32_t heap_index;       /* MQL_HEAP_NONE when no timer is armed */
    int32_t renewals;          /* successful renewals */
    uint32_t renew_sent;       /* when the in-flight renewal left, in ms after acquired_ms
                                  (mql_lease_renew_sent_ms; a lease lives at most max_lease,
                                  7 days, far below 2^32 ms) */
    uint32_t window_ms;        /* the invisible duration its receive or in-flight renewal
                                  asked for (they differ with invisible = "auto") */
    uint16_t attempts;         /* failed tries of the current renewal (saturates) */
    uint16_t topic;            /* its topic's index in the table's interned topics, or
                                  MQL_TOPIC_OWN: the name follows the handle's room
                                  (mql_lease_topic) */
    uint8_t state;             /* an mql_lease_state */
    uint8_t pending;           /* an mql_lease_pending: a release is under way (or waits) */
    uint8_t let_go;            /* the host chose to let it expire: not "expired while alive" */
    uint8_t uncertain;         /* a renewal got no reply: the broker may hold a newer handle
                                  (and a second deadline) we never saw */
    uint16_t handle_room;      /* bytes for the handle after the id in text, NUL included */
    char message_id[];         /* broker id, stable across redeliveries (same allocation),
                                  then its NUL, then handle_room bytes for the handle
                                  (then, for MQL_TOPIC_OWN, the topic and its NUL) */
} mql_lease;

/* When the lease's in-flight renewal left (monotonic ms), and setting it. */
static inline int64_t mql_lease_renew_sent_ms(const mql_lease *l) {
    return l->acquired_ms + (int64_t)l->renew_sent;
}
static inline void mql_lease_set_renew_sent(mql_lease *l, int64_t now_ms) {
    int64_t d = now_ms - l->acquired_ms;
    l->renew_sent = d <= 0 ? 0 : d >= (int64_t)UINT32_MAX ? UINT32_MAX : (uint32_t)d;
}

/* Bytes of one lease's allocation for a message id and a first handle of
 * these lengths (what mql_lease_add allocates). */
size_t mql_lease_alloc_size(size_t id_len, size_t handle_len);

/* One timer in the heap: its order kept beside the lease, so ordering never
 * reads the lease (see the heap in mql_lease.c). */
typedef struct mql_heap_slot {
    int64_t key;               /* mql_heap_key of the lease's timer and id */
    mql_lease *lease;
} mql_heap_slot;

/* A timer's order in one integer: its time, then, among timers of the same
 * millisecond, the low MQL_HEAP_TIE_BITS bits of its lease's id (ids count
 * up, so ties of leases received within 2^20 of each other go first come
 * first; which of two others goes first matters to nobody). Times are
 * monotonic milliseconds, far below 2^43 (278 years). */
#define MQL_HEAP_TIE_BITS 20
static inline int64_t mql_heap_key(int64_t when_ms, uint64_t id) {
    return when_ms * ((int64_t)1 << MQL_HEAP_TIE_BITS) +
           (int64_t)(id & (((uint64_t)1 << MQL_HEAP_TIE_BITS) - 1));
}

typedef struct mql_lease_table {
    char **topics;             /* interned topic names, at most MQL_TOPICS_MAX; a lease
                                  keeps its topic's index */
    size_t ntopics;
    uint16_t *topic_slots;     /* open addressing over topics: index + 1, 0 when empty */
    size_t ntopic_slots;       /* power of two, at least twice ntopics */
    mql_lease **buckets;
    size_t nbuckets;           /* power of two */
    size_t count;
    mql_heap_slot *heap;       /* HEAP_PAD slots into an aligned allocation */
    uint32_t heap_len;
    uint32_t heap_cap;
    uint64_t next_id;
} mql_lease_table;

void mql_lease_table_init(mql_lease_table *t);
void mql_lease_table_free(mql_lease_table *t);

/* Adds a held lease and returns it; the table owns it and copies the strings.
 * A lease is one allocation with its message id and its handle; the topic is
 * shared by every lease of that topic (past MQL_TOPICS_MAX names, kept in the
 * lease's record). */
mql_lease *mql_lease_add(mql_lease_table *t, const char *message_id, const char *topic,
                         const char *handle, int64_t now_ms, int64_t invisible_ms);
mql_lease *mql_lease_find(const mql_lease_table *t, uint64_t id);
/* The lease's topic name (interned in t, or in the lease's own record). */
const char *mql_lease_topic(const mql_lease_table *t, const mql_lease *l);
/* Unlinks and frees the lease (and disarms its timer). */
void mql_lease_remove(mql_lease_table *t, mql_lease *l);
/* Replaces the handle with a copy of handle: in place when it fits the room. */
void mql_lease_set_handle(mql_lease *l, const char *handle);
/* Same, taking ownership of a malloc'd handle (freed once copied in place). */
void mql_lease_take_handle(mql_lease *l, char *handle);

/* Arms (or re-arms) the lease's timer at when_ms; disarm takes it off the heap. */
void mql_lease_arm(mql_lease_table *t, mql_lease *l, int64_t when_ms);
void mql_lease_disarm(mql_lease_table *t, mql_lease *l);
/* The earliest armed timer, or NULL. */
mql_lease *mql_lease_next(const mql_lease_table *t);

/* Calls fn for every lease; fn may remove the lease it is given, nothing else. */
void mql_lease_each(mql_lease_table *t, void (*fn)(mql_lease *, void *), void *ud);

#endif /* MQL_LEASE_H */
