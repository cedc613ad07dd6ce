/* mql_sat.h -- saturating conversions of server-supplied durations and times.
 *
 * A google.protobuf.Timestamp or Duration comes from the network: its seconds
 * may be anything an int64 holds, and `seconds * 1000` on int64_t is undefined
 * behaviour past +-9.2e15 s. Every conversion of a wire time to milliseconds
 * goes through mql_pb_ms(), which clamps to [INT64_MIN, INT64_MAX] instead.
 * Header-only so the dev broker and the fuzz targets need no extra object.
 */
#ifndef MQL_SAT_H
#define MQL_SAT_H

#include <stdint.h>

/* seconds * 1000 + nanos / 1e6, saturated at the int64 range. */
static inline int64_t mql_pb_ms(int64_t seconds, int32_t nanos) {
    int64_t ms, r;
    if (__builtin_mul_overflow(seconds, (int64_t)1000, &ms))
        return seconds < 0 ? INT64_MIN : INT64_MAX;
    if (__builtin_add_overflow(ms, (int64_t)(nanos / 1000000), &r))
        return nanos < 0 ? INT64_MIN : INT64_MAX;
    return r;
}

/* a + b, saturated (for deadlines built from a server-supplied duration). */
static inline int64_t mql_sat_add(int64_t a, int64_t b) {
    int64_t r;
    if (__builtin_add_overflow(a, b, &r)) return b < 0 ? INT64_MIN : INT64_MAX;
    return r;
}

#endif /* MQL_SAT_H */
