/* mql_events.c -- event queue and wake-up descriptor (see mql_events.h). */
#include "mql_events.h"

#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

void mql_message_clear(mql_message *m) {
    size_t i;
    free(m->id);
    free(m->topic);
    free(m->tag);
    free(m->message_group);
    free(m->born_host);
    free(m->store_host);
    free(m->trace_context);
    free(m->receipt_handle);
    free(m->lite_topic);
    for (i = 0; i < m->nkeys; i++) free(m->keys[i]);
    free(m->keys);
    for (i = 0; i < m->nprops; i++) {
        free(m->props[i].key);
        free(m->props[i].value);
    }
    free(m->props);
    free(m->body);
    memset(m, 0, sizeof(*m));
}

void mql_reply_clear(mql_reply *r) {
    size_t i;
    for (i = 0; i < r->nelements; i++) mql_reply_clear(&r->elements[i]);
    free(r->elements);
    free(r->str);
    memset(r, 0, sizeof(*r));
}

mql_event *mql_event_new(mql_event_kind kind, uint64_t op) {
    mql_event *ev = mql_xcalloc(1, sizeof(*ev));
    ev->kind = kind;
    ev->op = op;
    mql_result_ok(&ev->result);
    return ev;
}

void mql_event_free(mql_event *ev) {
    size_t i;
    if (!ev) return;
    for (i = 0; i < ev->nmsgs; i++) mql_message_clear(&ev->msgs[i]);
    free(ev->msgs);
    free(ev->message_id);
    free(ev->recall_handle);
    free(ev->transaction_id);
    free(ev->entries);
    if (ev->reply) {
        mql_reply_clear(ev->reply);
        free(ev->reply);
    }
    free(ev);
}

int mql_events_init(mql_events *q) {
    memset(q, 0, sizeof(*q));
    q->fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (q->fd < 0) return -1;
    pthread_mutex_init(&q->mu, NULL);
    return 0;
}

void mql_events_destroy(mql_events *q) {
    mql_event *ev = q->head, *next;
    while (ev) {
        next = ev->next;
        mql_event_free(ev);
        ev = next;
    }
    q->head = q->tail = NULL;
    if (q->fd >= 0) close(q->fd);
    q->fd = -1;
    pthread_mutex_destroy(&q->mu);
}

void mql_events_push(mql_events *q, mql_event *ev) {
    uint64_t one = 1;
    ev->next = NULL;
    pthread_mutex_lock(&q->mu);
    if (q->tail) q->tail->next = ev;
    else q->head = ev;
    q->tail = ev;
    pthread_mutex_unlock(&q->mu);
    /* Written after the push: a reader that drains first and pops second
     * either sees this event now or wakes up again for it. */
    if (write(q->fd, &one, sizeof(one)) < 0) {
        /* EAGAIN only: the counter is saturated, so the fd is readable anyway. */
    }
}

void mql_events_push_all(mql_events *q, mql_event *list) {
    uint64_t one = 1;
    mql_event *last = list;
    if (!list) return;
    while (last->next) last = last->next;
    pthread_mutex_lock(&q->mu);
    if (q->tail) q->tail->next = list;
    else q->head = list;
    q->tail = last;
    pthread_mutex_unlock(&q->mu);
    if (write(q->fd, &one, sizeof(one)) < 0) {
        /* EAGAIN only, as in mql_events_push */
    }
}

mql_event *mql_events_take(mql_events *q) {
    uint64_t n;
    mql_event *list;
    if (read(q->fd, &n, sizeof(n)) < 0) {
        /* EAGAIN: nothing signalled; the queue may still hold events pushed
         * before a previous drain, so look anyway. */
    }
    pthread_mutex_lock(&q->mu);
    list = q->head;
    q->head = q->tail = NULL;
    pthread_mutex_unlock(&q->mu);
    return list;
}

void mql_events_requeue(mql_events *q, mql_event *list) {
    uint64_t one = 1;
    mql_event *last = list;
    if (!list) return;
    while (last->next) last = last->next;
    pthread_mutex_lock(&q->mu);
    last->next = q->head;
    q->head = list;
    if (!q->tail) q->tail = last;
    pthread_mutex_unlock(&q->mu);
    if (write(q->fd, &one, sizeof(one)) < 0) {
        /* EAGAIN only: the counter is saturated, so the fd is readable anyway. */
    }
}
