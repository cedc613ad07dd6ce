/* mql_anchor.h -- where a delivered message's deadline lies on our clock.
 *
 * The broker hides a popped message until popTime + invisibleTime, popTime
 * read on its own wall clock (the receipt handle's second field, see
 * mql_codec.h). Our clock is another one, and all we know is that the pop came
 * after our ReceiveMessage started and before its frame arrived. So the
 * offset (broker wall - our monotonic) is at most popTime - start, for every
 * receive: the smallest such bound seen (a receive answered at once makes it
 * tight) puts the deadline at the earliest it can be, popTime + invisible -
 * offset. It is never later than arrival + invisible (the pop came before the
 * frame) nor earlier than start + invisible (nor than the pop, after it); a
 * handle with no pop time we can read is counted from the start, and so is one
 * the bound would place after its frame (the broker's clock moved ahead of
 * what the bound was learnt from: it is learnt again).
 *
 * Counting from the frame's arrival, as before, believed in time the broker no
 * longer gave: the whole of a long poll, or a slow proxy's delay.
 */
#ifndef MQL_ANCHOR_H
#define MQL_ANCHOR_H

#include <stdint.h>

typedef struct mql_anchor {
    int known;
    int64_t offset_max;     /* broker wall ms - our monotonic ms is at most this */
} mql_anchor;

/* The deadline (our monotonic ms) of a message popped at pop_ms (broker wall;
 * has_pop 0 if unknown) for a receive started at start_ms that arrived at
 * arrival_ms; learns from the pop time. */
int64_t mql_anchor_deadline(mql_anchor *a, int64_t start_ms, int64_t arrival_ms, int has_pop,
                            int64_t pop_ms, int64_t invisible_ms);

#endif /* MQL_ANCHOR_H */
