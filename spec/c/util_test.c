/* util_test.c -- the saturating time helpers of mql_util.c without a server:
 * every Duration/Timestamp a peer can send converts without overflow (this
 * program runs under UBSan, which aborts on signed overflow). */
#include <stdint.h>

#include "mql.h"
#include "mql_test.h"

static void converts_ordinary_durations_exactly(void) {
    CHECK(mql_duration_ms(10, 0) == 10000);
    CHECK(mql_duration_ms(0, 999999999) == 999);
    CHECK(mql_duration_ms(43200, 500000000) == 43200500);
    CHECK(mql_timestamp_ms(1700000000, 123000000) == 1700000000123LL);
}

static void clamps_huge_durations_instead_of_overflowing(void) {
    CHECK(mql_duration_ms(INT64_MAX, INT32_MAX) == MQL_MS_MAX);
    CHECK(mql_duration_ms(INT64_MAX / 1000, 999999999) == MQL_MS_MAX);
    CHECK(mql_duration_ms(MQL_MS_MAX / 1000, INT32_MAX) == MQL_MS_MAX);
    CHECK(mql_timestamp_ms(INT64_MAX, 0) == MQL_MS_MAX);
}

static void reads_negative_durations_as_zero(void) {
    CHECK(mql_duration_ms(-1, 0) == 0);
    CHECK(mql_duration_ms(INT64_MIN, INT32_MIN) == 0);
    CHECK(mql_duration_ms(0, -5000000) == 0);
}

static void keeps_negative_timestamps_within_bounds(void) {
    CHECK(mql_timestamp_ms(-1, 0) == -1000);
    CHECK(mql_timestamp_ms(INT64_MIN, INT32_MIN) == -MQL_MS_MAX);
}

static void adds_without_overflow(void) {
    CHECK(mql_add_ms(1000, 2000) == 3000);
    CHECK(mql_add_ms(INT64_MAX, INT64_MAX) == MQL_MS_MAX);
    CHECK(mql_add_ms(INT64_MIN, -1) == -MQL_MS_MAX);
    CHECK(mql_add_ms(MQL_MS_MAX, MQL_MS_MAX) == MQL_MS_MAX);
    CHECK(mql_add_ms(mql_duration_ms(INT64_MAX, 0), mql_duration_ms(INT64_MAX, 0)) == MQL_MS_MAX);
    CHECK(mql_add_ms(-5, 3) == -2);
}

int main(void) {
    RUN(converts_ordinary_durations_exactly);
    RUN(clamps_huge_durations_instead_of_overflowing);
    RUN(reads_negative_durations_as_zero);
    RUN(keeps_negative_timestamps_within_bounds);
    RUN(adds_without_overflow);
    return TEST_REPORT("util_test");
}
