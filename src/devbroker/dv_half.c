/* dv_half.c -- half messages kept until their transaction ends (see dv_half.h). */
#include "dv_half.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mql.h"

void dv_half_init(dv_halves *h) { memset(h, 0, sizeof(*h)); }

static void clear(dv_half *x) {
    free(x->topic);
    free(x->id);
    free(x->tx);
    free(x->wire);
}

void dv_half_free(dv_halves *h) {
    size_t i;
    for (i = 0; i < h->n; i++) clear(&h->v[i]);
    free(h->v);
    memset(h, 0, sizeof(*h));
}

const char *dv_half_add(dv_halves *h, const char *topic, const char *id,
                        const Apache__Rocketmq__V2__Message *m, int64_t check_at) {
    dv_half *x;
    char tx[48];
    if (h->n == h->cap) {
        h->cap = h->cap ? h->cap * 2 : 16;
        h->v = realloc(h->v, h->cap * sizeof(*h->v));
        if (!h->v) abort();
    }
    x = &h->v[h->n++];
    memset(x, 0, sizeof(*x));
    /* the broker's transaction ids are its own (the proxy passes them on) */
    snprintf(tx, sizeof(tx), "DVTX%016llu", (unsigned long long)++h->next_tx);
    x->topic = mql_strdup(topic);
    x->id = mql_strdup(id);
    x->tx = mql_strdup(tx);
    x->wire_len = protobuf_c_message_get_packed_size(&m->base);
    x->wire = mql_xmalloc(x->wire_len ? x->wire_len : 1);
    protobuf_c_message_pack(&m->base, x->wire);
    x->check_at = check_at;
    h->begun++;
    return x->tx;
}

dv_half *dv_half_find(dv_halves *h, const char *tx) {
    size_t i;
    for (i = 0; i < h->n; i++)
        if (strcmp(h->v[i].tx, tx) == 0) return &h->v[i];
    return NULL;
}

void dv_half_remove(dv_halves *h, dv_half *x) {
    size_t i = (size_t)(x - h->v);
    clear(x);
    if (i + 1 < h->n) memmove(&h->v[i], &h->v[i + 1], (h->n - i - 1) * sizeof(*h->v));
    h->n--;
}
