/* mql_backoff.c -- exponential backoff with equal jitter (see mql_backoff.h). */
#include "mql_backoff.h"

void mql_backoff_init(mql_backoff *b, int64_t base_ms, int64_t cap_ms) {
    b->base_ms = base_ms > 0 ? base_ms : 1;
    b->cap_ms = cap_ms >= b->base_ms ? cap_ms : b->base_ms;
    b->attempt = 0;
}

int64_t mql_backoff_next(mql_backoff *b, uint64_t rnd) {
    int64_t ceil = b->base_ms;
    unsigned i;
    /* doubling stops at the cap, and a double that would pass it is the cap:
     * it cannot overflow however long it fails, whatever the cap */
    for (i = 0; i < b->attempt && ceil < b->cap_ms; i++)
        ceil = ceil > b->cap_ms / 2 ? b->cap_ms : ceil * 2;
    if (ceil > b->cap_ms) ceil = b->cap_ms;
    if (b->attempt < 64) b->attempt++;
    return ceil - ceil / 2 + (int64_t)(rnd % (uint64_t)(ceil / 2 + 1));
}

void mql_backoff_reset(mql_backoff *b) {
    b->attempt = 0;
}
