/* dv_store.h -- the dev broker's in-memory topics with POP semantics.
 *
 * What RocketMQ 5's proxy + broker do for a SimpleConsumer, in memory:
 * topics hold messages in send order; each consumer group has its own view of
 * every message (ready, in flight until a deadline, acked, or dead-lettered);
 * a receive hides each message it returns for the invisible duration and
 * hands out a receipt handle; an ack or a change must present the *current*
 * handle before its deadline. Differences from RocketMQ are listed in
 * README ("Dev broker"); a conformance spec runs against both.
 *
 * Not thread-safe: the server thread owns it.
 */
#ifndef DV_STORE_H
#define DV_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "apache/rocketmq/v2/service.pb-c.h"

#define DV_MAX_ATTEMPTS 17   /* retryMaxTimes 16 + 1, as the proxy's default */

typedef enum dv_msg_state { DV_READY = 0, DV_INFLIGHT, DV_ACKED, DV_DEAD } dv_msg_state;

typedef struct dv_view {       /* one group's view of one message */
    dv_msg_state state;
    int attempts;              /* deliveries so far */
    uint64_t token;            /* the current handle's token */
    int64_t visible_at;        /* wall ms when an in-flight message becomes ready */
    int changes;               /* successful ChangeInvisibleDuration calls */
    size_t skip;               /* settled (acked, dead): a later index with no unsettled
                                * view between; 0 until set, meaning the next one */
} dv_view;

typedef struct dv_message {
    char *id;
    char *tag;                 /* NULL: none */
    uint8_t *wire;             /* the Message as the producer sent it, packed */
    size_t wire_len;
    int64_t born_ms, store_ms;
    int64_t deliver_ms;        /* a delay message: not delivered before (wall ms); 0: at once */
    int queue_id;
    int64_t offset;
} dv_message;

typedef struct dv_group {
    char *name;
    dv_view *views;            /* by message index of its topic */
    size_t nviews;
} dv_group;

typedef struct dv_topic {
    char *name;
    dv_message *msgs;
    size_t n, cap;
    dv_group *groups;
    size_t ngroups;
} dv_topic;

typedef struct dv_store {
    dv_topic *topics;
    size_t ntopics;
    uint64_t next_token;
    uint64_t next_id;
    uint64_t examined;         /* views a pop looked at, all pops: the test of its cost */
} dv_store;

void dv_store_init(dv_store *s);
void dv_store_free(dv_store *s);
dv_topic *dv_topic_find(dv_store *s, const char *name);
dv_topic *dv_topic_create(dv_store *s, const char *name);

/* Stores a message sent to t; returns its index. */
size_t dv_topic_append(dv_topic *t, const Apache__Rocketmq__V2__Message *m, const char *id,
                       int64_t now_ms);

/* Pops up to batch ready messages for group that match filter ("*" or
 * "a||b"), hiding each for invisible_ms. Writes their indexes to out and
 * returns how many. Messages past DV_MAX_ATTEMPTS go to the dead-letter state. */
size_t dv_pop(dv_store *s, dv_topic *t, const char *group, const char *filter, size_t batch,
              int64_t invisible_ms, int64_t now_ms, size_t *out);

/* Outcomes of a handle: OK, or one of these (mapped to RocketMQ codes). */
typedef enum dv_handle_result {
    DV_HANDLE_OK = 0,
    DV_HANDLE_SUPERSEDED,      /* a newer handle exists: the real proxy answers OK, does nothing */
    DV_HANDLE_EXPIRED,         /* INVALID_RECEIPT_HANDLE "receipt handle is expired" */
    DV_HANDLE_MALFORMED
} dv_handle_result;

/* Writes the handle of (t, group, index) into buf. */
void dv_handle_format(char *buf, size_t len, const dv_store *s, const dv_topic *t,
                      const char *group, size_t index);
dv_handle_result dv_ack(dv_store *s, const char *handle, int64_t now_ms);
/* On OK writes the new handle to out. max_changes < 0: no cap; at the cap the
 * change fails with DV_HANDLE_EXPIRED's sibling, reported by *capped = 1. */
dv_handle_result dv_change(dv_store *s, const char *handle, int64_t duration_ms, int64_t now_ms,
                           int max_changes, int *capped, char *out, size_t outlen);

dv_view *dv_view_of(dv_topic *t, const char *group, size_t index);

#endif /* DV_STORE_H */
