/* mql_events.h -- the one way results leave the core: a queue plus a descriptor.
 *
 * Core threads push events (an operation finished, a lease changed state) and
 * write to an eventfd; the host drains the descriptor first and then pops the
 * whole queue, so a wake-up can never be lost between the two. The descriptor
 * is what a Lua event loop polls (the cqueues "pollable" convention).
 *
 * Every event owns its payload; mql_event_free releases all of it.
 */
#ifndef MQL_EVENTS_H
#define MQL_EVENTS_H

#include <pthread.h>
#include <stdint.h>

#include "mql.h"

typedef struct mql_kv {
    char *key;
    char *value;
    size_t value_len;      /* values may hold any bytes (sending: 0 means strlen(value)) */
} mql_kv;

/* A received message, as the host sees it, with every system property the
 * official clients expose (names follow the Java MessageView getters).
 * Strings are NUL-terminated copies, NULL when the server sent none; the body
 * and property values may hold any bytes. Times are epoch milliseconds, 0 when
 * absent, saturated (never overflowed) when the server sent a wild value.
 * lease_id names its entry in the lease table. */
typedef struct mql_message {
    char *id;
    char *topic;
    char *tag;             /* NULL when the message has none */
    char *message_group;   /* NULL unless FIFO */
    char *born_host;
    char *store_host;
    char *trace_context;
    char *receipt_handle;  /* the handle it was delivered with (the lease keeps the latest) */
    char *lite_topic;      /* its lite topic under topic (LITE topics, RocketMQ 5.5), else NULL */
    char **keys;
    size_t nkeys;
    mql_kv *props;
    size_t nprops;
    uint8_t *body;         /* after digest check and inflation (see mql_body.h) */
    size_t body_len;
    int message_type;      /* apache.rocketmq.v2.MessageType: 1 NORMAL, 2 FIFO, 3 DELAY, 4 TRANSACTION,
                              5 LITE, 6 PRIORITY */
    int delivery_attempt;
    int has_priority;      /* the server sent a priority (PRIORITY topics, RocketMQ 5.4+) */
    int priority;
    int queue_id;
    int64_t queue_offset;
    int64_t born_ms;       /* wall clock, epoch ms */
    int64_t store_ms;
    int64_t delivery_ms;   /* delay/timer messages: when it was due */
    uint64_t lease_id;
} mql_message;

void mql_message_clear(mql_message *m);

typedef enum mql_event_kind {
    MQL_EV_OP = 1,      /* an operation started by the host finished */
    MQL_EV_LEASE = 2,   /* a lease changed state on its own (renewal failed, expired, budget) */
    MQL_EV_LOCK_LOST = 3, /* a Redis lock kept alive by the core could not be renewed */
    MQL_EV_ORPHAN = 4    /* the proxy asks about a half message (RecoverOrphanedTransactionCommand) */
} mql_event_kind;

/* A Redis reply, copied out of hiredis (see mql_redis.h). */
typedef enum mql_reply_type {
    MQL_REPLY_NIL = 0,
    MQL_REPLY_STRING,
    MQL_REPLY_STATUS,
    MQL_REPLY_INTEGER,
    MQL_REPLY_ARRAY,
    MQL_REPLY_ERROR
} mql_reply_type;

typedef struct mql_reply {
    mql_reply_type type;
    long long integer;
    char *str;                  /* STRING, STATUS, ERROR: may hold any bytes */
    size_t len;
    struct mql_reply *elements; /* ARRAY */
    size_t nelements;
} mql_reply;

void mql_reply_clear(mql_reply *r);

typedef struct mql_event {
    struct mql_event *next;
    mql_event_kind kind;
    uint64_t op;                /* MQL_EV_OP: the id the start function returned */
    mql_result result;
    /* MQL_EV_OP payloads, by operation */
    mql_message *msgs;          /* receive; MQL_EV_ORPHAN: the half message (one) */
    size_t nmsgs;
    char *message_id;           /* send: the id of the message sent */
    char *transaction_id;       /* send of a half message; MQL_EV_ORPHAN: the one to end */
    int64_t offset;             /* send: its queue offset */
    char *recall_handle;        /* send: the handle RecallMessage takes (5.3.2+ delay messages); NULL: none */
    mql_result *entries;        /* ack: one result per lease, in request order */
    size_t nentries;
    mql_reply *reply;           /* redis command */
    /* MQL_EV_LEASE payload */
    uint64_t lease_id;
    int lease_state;            /* an mql_lease_state */
    int lease_renewals;         /* successful renewals so far */
    /* MQL_EV_LOCK_LOST payload: the keepalive whose Redis lock was lost */
    uint64_t keepalive_id;
} mql_event;

mql_event *mql_event_new(mql_event_kind kind, uint64_t op);
void mql_event_free(mql_event *ev);

typedef struct mql_events {
    pthread_mutex_t mu;
    mql_event *head;
    mql_event *tail;
    int fd;                     /* eventfd, readable while events may wait */
} mql_events;

int mql_events_init(mql_events *q);   /* 0 or -1 (errno set) */
void mql_events_destroy(mql_events *q);
void mql_events_push(mql_events *q, mql_event *ev);
/* Appends a chain of events (linked by next) with one wake-up: the host
 * wakes once for a batch instead of once per event. */
void mql_events_push_all(mql_events *q, mql_event *list);
/* Drains the descriptor, then takes every queued event as a list (oldest first). */
mql_event *mql_events_take(mql_events *q);
/* Puts a taken list back in front of the queue (the host could not take it,
 * e.g. out of memory) and makes the descriptor readable again. */
void mql_events_requeue(mql_events *q, mql_event *list);

#endif /* MQL_EVENTS_H */
