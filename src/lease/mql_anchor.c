/* mql_anchor.c -- a delivered message's deadline on our clock (see mql_anchor.h). */
#include "mql_anchor.h"

int64_t mql_anchor_deadline(mql_anchor *a, int64_t start_ms, int64_t arrival_ms, int has_pop,
                            int64_t pop_ms, int64_t invisible_ms) {
    int64_t at = start_ms + invisible_ms, latest = arrival_ms + invisible_ms, placed;
    if (!has_pop) return at;
    /* this pop came after our start: the offset is at most pop - start */
    if (!a->known || pop_ms - start_ms < a->offset_max) {
        a->offset_max = pop_ms - start_ms;
        a->known = 1;
    }
    placed = pop_ms - a->offset_max;
    if (placed > arrival_ms) {
        /* A pop after its frame arrived: the bound was learnt from a broker
         * clock that has since moved ahead (a step forward, or another
         * broker's clock). Clamped to the arrival it would be counted late,
         * and so would every later one (the bound only goes down): learn it
         * again from this pop, which places it at our start. */
        a->offset_max = pop_ms - start_ms;
        placed = start_ms;
    }
    if (placed + invisible_ms > at) at = placed + invisible_ms;
    return at < latest ? at : latest;
}
