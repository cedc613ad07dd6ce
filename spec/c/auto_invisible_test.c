/* auto_invisible_test.c -- the adaptive lease length without a server: the
 * start value, p99 x margin within bounds, a p99 never under-estimated, and a
 * value that follows a workload which changes (mql_auto.h). */
#include <stdint.h>

#include "mql_auto.h"
#include "mql_test.h"

#define MIN 10000
#define MAX 600000
#define START 30000

static void keeps_the_start_value_until_enough_samples(void) {
    mql_auto a;
    int i;
    mql_auto_init(&a, START, MIN, MAX, 200);
    CHECK(a.value_ms == START);
    for (i = 0; i < MQL_AUTO_MIN_SAMPLES - 1; i++) CHECK(mql_auto_observe(&a, 100) == 0);
    CHECK(a.value_ms == START);
    CHECK(mql_auto_observe(&a, 100) == 1);   /* the 100th sample */
    CHECK(a.value_ms == MIN);                /* 2 x 0.1 s is under the floor */
}

static void the_start_value_is_clamped_to_the_bounds(void) {
    mql_auto a;
    mql_auto_init(&a, START, 1000, 5000, 200);
    CHECK(a.value_ms == 5000);
    mql_auto_init(&a, START, 60000, MAX, 200);
    CHECK(a.value_ms == 60000);
}

/* 1,000 handlers: 98.9 % take 1 s, 1.1 % take 6 s: the p99 is 6 s. */
static void asks_for_the_p99_times_the_margin(void) {
    mql_auto a;
    int i;
    mql_auto_init(&a, START, 1000, MAX, 200);
    for (i = 0; i < 1000; i++) mql_auto_observe(&a, i % 90 == 0 ? 6000 : 1000);
    CHECK(a.p99_ms >= 6000);
    CHECK(a.p99_ms < 6000 * 110 / 100);      /* one bucket: 9 % */
    CHECK(a.value_ms == a.p99_ms * 2);
}

static void a_p99_is_never_below_the_durations_of_its_bucket(void) {
    int64_t ms;
    for (ms = 0; ms < 5000000; ms = ms * 3 / 2 + 1) {
        int64_t b = mql_auto_bucket_bound(ms);
        CHECK(b >= ms);
        CHECK(b <= ms * 110 / 100 + 2);
    }
}

static void the_value_stays_within_the_bounds(void) {
    mql_auto a;
    int i;
    mql_auto_init(&a, START, MIN, MAX, 300);
    for (i = 0; i < 500; i++) mql_auto_observe(&a, 3600000);   /* hour-long handlers */
    CHECK(a.value_ms == MAX);
    mql_auto_init(&a, START, MIN, MAX, 300);
    for (i = 0; i < 500; i++) mql_auto_observe(&a, 5);
    CHECK(a.value_ms == MIN);
}

/* Handlers slow down from 1 s to 20 s: the value follows as soon as more than
 * 1 % of the releases are slow. Back to 1 s, it comes down only once the slow
 * ones have decayed under 1 % (some 10,000 releases): a short window needs the
 * more evidence, since a too short one costs renewals and a too long one only
 * a slower handoff. */
static void follows_a_workload_that_changes(void) {
    mql_auto a;
    int i;
    mql_auto_init(&a, START, 1000, MAX, 200);
    for (i = 0; i < 3000; i++) mql_auto_observe(&a, 1000);
    CHECK(a.value_ms >= 2000 && a.value_ms < 2200);
    for (i = 0; i < 100; i++) mql_auto_observe(&a, 20000);
    CHECK(a.value_ms >= 40000 && a.value_ms < 44000);
    for (i = 0; i < 6000; i++) mql_auto_observe(&a, 20000);
    for (i = 0; i < 3000; i++) mql_auto_observe(&a, 1000);
    CHECK(a.value_ms >= 40000);
    for (i = 0; i < 12000; i++) mql_auto_observe(&a, 1000);
    CHECK(a.value_ms >= 2000 && a.value_ms < 2200);
}

int main(void) {
    RUN(keeps_the_start_value_until_enough_samples);
    RUN(the_start_value_is_clamped_to_the_bounds);
    RUN(asks_for_the_p99_times_the_margin);
    RUN(a_p99_is_never_below_the_durations_of_its_bucket);
    RUN(the_value_stays_within_the_bounds);
    RUN(follows_a_workload_that_changes);
    return TEST_REPORT("auto_invisible_test");
}
