/* dv_store.c -- in-memory topics with POP semantics (see dv_store.h).
 *
 * A receipt handle is "dv <topic> <group> <index> <token> <deadline_ms>": like
 * the real proxy's, it carries its own deadline, so an expired handle is known
 * without looking anything up, and the token tells the current handle from a
 * superseded one.
 */
#include "dv_store.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mql.h"

void dv_store_init(dv_store *s) {
    memset(s, 0, sizeof(*s));
    s->next_token = 1;
}

void dv_store_free(dv_store *s) {
    size_t i, j;
    for (i = 0; i < s->ntopics; i++) {
        dv_topic *t = &s->topics[i];
        for (j = 0; j < t->n; j++) {
            free(t->msgs[j].id);
            free(t->msgs[j].tag);
            free(t->msgs[j].wire);
        }
        free(t->msgs);
        for (j = 0; j < t->ngroups; j++) {
            free(t->groups[j].name);
            free(t->groups[j].views);
        }
        free(t->groups);
        free(t->name);
    }
    free(s->topics);
    memset(s, 0, sizeof(*s));
}

dv_topic *dv_topic_find(dv_store *s, const char *name) {
    size_t i;
    for (i = 0; i < s->ntopics; i++)
        if (strcmp(s->topics[i].name, name) == 0) return &s->topics[i];
    return NULL;
}

dv_topic *dv_topic_create(dv_store *s, const char *name) {
    dv_topic *t = dv_topic_find(s, name);
    if (t) return t;
    s->topics = realloc(s->topics, (s->ntopics + 1) * sizeof(*s->topics));
    if (!s->topics) abort();
    t = &s->topics[s->ntopics++];
    memset(t, 0, sizeof(*t));
    t->name = mql_strdup(name);
    return t;
}

static dv_group *group_of(dv_topic *t, const char *name, size_t *index) {
    size_t i;
    for (i = 0; i < t->ngroups; i++) {
        if (strcmp(t->groups[i].name, name) == 0) {
            if (index) *index = i;
            return &t->groups[i];
        }
    }
    t->groups = realloc(t->groups, (t->ngroups + 1) * sizeof(*t->groups));
    if (!t->groups) abort();
    memset(&t->groups[t->ngroups], 0, sizeof(dv_group));
    t->groups[t->ngroups].name = mql_strdup(name);
    if (index) *index = t->ngroups;
    return &t->groups[t->ngroups++];
}

dv_view *dv_view_of(dv_topic *t, const char *group, size_t index) {
    dv_group *g = group_of(t, group, NULL);
    if (g->nviews <= index) {
        size_t n = t->cap > index ? t->cap : index + 1;
        g->views = realloc(g->views, n * sizeof(*g->views));
        if (!g->views) abort();
        memset(g->views + g->nviews, 0, (n - g->nviews) * sizeof(*g->views));
        g->nviews = n;
    }
    return &g->views[index];
}

size_t dv_topic_append(dv_topic *t, const Apache__Rocketmq__V2__Message *m, const char *id,
                       int64_t now_ms) {
    dv_message *d;
    const Apache__Rocketmq__V2__SystemProperties *sp = m->system_properties;
    if (t->n == t->cap) {
        t->cap = t->cap ? t->cap * 2 : 64;
        t->msgs = realloc(t->msgs, t->cap * sizeof(*t->msgs));
        if (!t->msgs) abort();
    }
    d = &t->msgs[t->n];
    memset(d, 0, sizeof(*d));
    d->id = mql_strdup(id);
    d->tag = sp && sp->tag && *sp->tag ? mql_strdup(sp->tag) : NULL;
    d->wire_len = protobuf_c_message_get_packed_size(&m->base);
    d->wire = mql_xmalloc(d->wire_len);
    protobuf_c_message_pack(&m->base, d->wire);
    d->born_ms = sp && sp->born_timestamp
                     ? mql_timestamp_ms(sp->born_timestamp->seconds, sp->born_timestamp->nanos)
                     : now_ms;
    d->deliver_ms = sp && sp->delivery_timestamp
                        ? mql_timestamp_ms(sp->delivery_timestamp->seconds, sp->delivery_timestamp->nanos)
                        : 0;
    d->store_ms = now_ms;
    d->queue_id = (int)(t->n % 4);
    d->offset = (int64_t)(t->n / 4);
    return t->n++;
}

/* "*" or empty matches all; else "a||b||c" must contain the tag. */
static int tag_matches(const char *filter, const char *tag) {
    const char *p = filter;
    size_t len;
    if (!filter || !*filter || strcmp(filter, "*") == 0) return 1;
    if (!tag) return 0;
    len = strlen(tag);
    while (*p) {
        const char *end = strstr(p, "||");
        size_t n = end ? (size_t)(end - p) : strlen(p);
        while (n && *p == ' ') { p++; n--; }
        while (n && p[n - 1] == ' ') n--;
        if (n == len && strncmp(p, tag, len) == 0) return 1;
        if (!end) break;
        p = end + 2;
    }
    return 0;
}

static int settled(const dv_view *v) { return v->state == DV_ACKED || v->state == DV_DEAD; }

/* The first view at or after i that is not settled, or n. A settled view
 * never becomes ready again, so the walk can follow skip links and then point
 * every link it followed at where it ended (path compression, as in a
 * union-find): over a run each settled view is passed a few times, not once
 * per receive, while an unsettled one -- in flight, waiting for its delivery
 * time -- is never passed over, so an expired lease is found again. */
static size_t next_unsettled(dv_store *s, dv_group *g, size_t n, size_t i) {
    size_t end = i, next;
    while (end < n && settled(&g->views[end])) {
        end = g->views[end].skip ? g->views[end].skip : end + 1;
        s->examined++;
    }
    while (i < end) {
        next = g->views[i].skip ? g->views[i].skip : i + 1;
        g->views[i].skip = end;
        i = next;
    }
    return end;
}

size_t dv_pop(dv_store *s, dv_topic *t, const char *group, const char *filter, size_t batch,
              int64_t invisible_ms, int64_t now_ms, size_t *out) {
    size_t i, n = 0;
    dv_group *g;
    if (t->n == 0) return 0;
    dv_view_of(t, group, t->n - 1);   /* every view exists: g->views stays put below */
    g = group_of(t, group, NULL);
    for (i = next_unsettled(s, g, t->n, 0); i < t->n && n < batch;
         i = next_unsettled(s, g, t->n, i + 1)) {
        dv_view *v = &g->views[i];
        s->examined++;
        if (v->state == DV_INFLIGHT && v->visible_at <= now_ms) v->state = DV_READY;
        if (v->state != DV_READY || t->msgs[i].deliver_ms > now_ms) continue;
        if (!tag_matches(filter, t->msgs[i].tag)) {
            v->state = DV_ACKED;   /* the proxy acks what the filter drops */
            continue;
        }
        if (v->attempts >= DV_MAX_ATTEMPTS) {
            v->state = DV_DEAD;    /* to %DLQ%<group> at receive time, as the proxy does */
            continue;
        }
        v->state = DV_INFLIGHT;
        v->attempts++;
        v->token = s->next_token++;
        v->visible_at = mql_add_ms(now_ms, invisible_ms);
        v->changes = 0;
        out[n++] = i;
    }
    return n;
}

void dv_handle_format(char *buf, size_t len, const dv_store *s, const dv_topic *t,
                      const char *group, size_t index) {
    size_t gi = 0;
    dv_view *v;
    group_of((dv_topic *)t, group, &gi);
    v = dv_view_of((dv_topic *)t, group, index);
    snprintf(buf, len, "dv %zu %zu %zu %" PRIu64 " %" PRId64, (size_t)(t - s->topics), gi, index,
             v->token, v->visible_at);
}

typedef struct parsed {
    dv_topic *t;
    dv_view *v;
    size_t ti, gi, index;
    uint64_t token;
    int64_t deadline;
} parsed;

/* Reads one unsigned decimal field and the space after it; -1 on anything
 * else, an overflow included (sscanf's %zu would make that undefined). */
static int field(const char **p, uint64_t max, uint64_t *out) {
    char *end;
    unsigned long long v;
    if (**p < '0' || **p > '9') return -1;
    errno = 0;
    v = strtoull(*p, &end, 10);
    if (errno || v > max || (*end != ' ' && *end != '\0')) return -1;
    *out = v;
    *p = *end ? end + 1 : end;
    return 0;
}

static dv_handle_result parse(dv_store *s, const char *handle, parsed *p) {
    const char *c = handle;
    uint64_t v[5];
    int i;
    if (strncmp(c, "dv ", 3) != 0) return DV_HANDLE_MALFORMED;
    c += 3;
    for (i = 0; i < 5; i++)
        if (field(&c, i == 4 ? (uint64_t)INT64_MAX : UINT64_MAX, &v[i]) < 0) return DV_HANDLE_MALFORMED;
    if (*c) return DV_HANDLE_MALFORMED;
    p->ti = v[0] < SIZE_MAX ? (size_t)v[0] : SIZE_MAX;
    p->gi = v[1] < SIZE_MAX ? (size_t)v[1] : SIZE_MAX;
    p->index = v[2] < SIZE_MAX ? (size_t)v[2] : SIZE_MAX;
    p->token = v[3];
    p->deadline = (int64_t)v[4];
    if (p->ti >= s->ntopics) return DV_HANDLE_MALFORMED;
    p->t = &s->topics[p->ti];
    if (p->gi >= p->t->ngroups || p->index >= p->t->n) return DV_HANDLE_MALFORMED;
    p->v = dv_view_of(p->t, p->t->groups[p->gi].name, p->index);
    return DV_HANDLE_OK;
}

dv_handle_result dv_ack(dv_store *s, const char *handle, int64_t now_ms) {
    parsed p;
    dv_handle_result r = parse(s, handle, &p);
    if (r != DV_HANDLE_OK) return r;
    if (p.deadline <= now_ms) return DV_HANDLE_EXPIRED;
    if (p.token != p.v->token || p.v->state != DV_INFLIGHT) return DV_HANDLE_SUPERSEDED;
    p.v->state = DV_ACKED;
    return DV_HANDLE_OK;
}

dv_handle_result dv_change(dv_store *s, const char *handle, int64_t duration_ms, int64_t now_ms,
                           int max_changes, int *capped, char *out, size_t outlen) {
    parsed p;
    dv_handle_result r = parse(s, handle, &p);
    *capped = 0;
    if (r != DV_HANDLE_OK) return r;
    if (p.deadline <= now_ms) return DV_HANDLE_EXPIRED;
    if (p.token != p.v->token || p.v->state != DV_INFLIGHT) return DV_HANDLE_SUPERSEDED;
    if (max_changes >= 0 && p.v->changes >= max_changes) {
        *capped = 1;
        return DV_HANDLE_OK;
    }
    p.v->changes++;
    p.v->token = s->next_token++;
    p.v->visible_at = mql_add_ms(now_ms, duration_ms);
    snprintf(out, outlen, "dv %zu %zu %zu %" PRIu64 " %" PRId64, p.ti, p.gi, p.index, p.v->token,
             p.v->visible_at);
    return DV_HANDLE_OK;
}
