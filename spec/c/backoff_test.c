/* backoff_test.c -- the reconnection backoff without a server (mql_backoff.h):
 * each wait is within [ceil/2, ceil], ceils double up to the cap, a success
 * makes the next wait short again, and the random number spreads waits. */
#include "mql_backoff.h"
#include "mql_test.h"

static void waits_double_from_the_base_within_their_jitter(void) {
    mql_backoff b;
    int64_t ceil = 200;
    int n;
    mql_backoff_init(&b, 200, 10000);
    for (n = 0; n < 6; n++, ceil *= 2) {
        int64_t w = mql_backoff_next(&b, (uint64_t)n * 7919u);
        CHECK(w >= ceil / 2);
        CHECK(w <= ceil);
    }
}

static void the_random_number_picks_the_point_in_the_range(void) {
    mql_backoff b;
    mql_backoff_init(&b, 200, 10000);
    CHECK(mql_backoff_next(&b, 0) == 100);        /* the floor: half the ceiling */
    mql_backoff_reset(&b);
    CHECK(mql_backoff_next(&b, 100) == 200);      /* rnd % 101 == 100: the ceiling */
    mql_backoff_reset(&b);
    CHECK(mql_backoff_next(&b, 101 + 37) == 137);
}

static void waits_never_pass_the_cap_however_long_it_fails(void) {
    mql_backoff b;
    int n, at_cap_range = 0;
    mql_backoff_init(&b, 200, 10000);
    for (n = 0; n < 1000; n++) {
        int64_t w = mql_backoff_next(&b, 0x9E3779B97F4A7C15ULL * (uint64_t)(n + 1));
        CHECK(w <= 10000);
        CHECK(w >= 100);
        if (n >= 6) {
            CHECK(w >= 5000);   /* ceil is the cap from the 7th wait on */
            at_cap_range++;
        }
    }
    CHECK(at_cap_range == 994);
}

static void a_success_makes_the_next_wait_short_again(void) {
    mql_backoff b;
    int n;
    mql_backoff_init(&b, 200, 10000);
    for (n = 0; n < 20; n++) mql_backoff_next(&b, 12345);
    CHECK(mql_backoff_next(&b, 0) == 5000);
    mql_backoff_reset(&b);
    CHECK(b.attempt == 0);
    CHECK(mql_backoff_next(&b, 0) == 100);
}

static void jitter_spreads_a_fleet_that_lost_the_same_proxy(void) {
    /* 1000 consumers, each its own random sequence, at their 4th wait
     * (ceil 1600 ms): they must not come back in a few instants */
    static int per_100ms[17];
    int i, n, busiest = 0;
    uint64_t s = 88172645463325252ULL;
    for (i = 0; i < 1000; i++) {
        mql_backoff b;
        int64_t w = 0;
        mql_backoff_init(&b, 200, 10000);
        for (n = 0; n < 4; n++) {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            w = mql_backoff_next(&b, s);
        }
        CHECK(w >= 800 && w <= 1600);
        per_100ms[w / 100]++;
    }
    for (i = 0; i < 17; i++)
        if (per_100ms[i] > busiest) busiest = per_100ms[i];
    CHECK(busiest < 200);   /* 8 buckets of 100 ms: ~125 each if uniform */
}

static void nonsense_settings_are_made_sane(void) {
    mql_backoff b;
    mql_backoff_init(&b, 0, -5);
    CHECK(b.base_ms == 1);
    CHECK(b.cap_ms == 1);
    CHECK(mql_backoff_next(&b, 99) >= 0);
    CHECK(mql_backoff_next(&b, 99) <= 1);
}

/* The doubling stopped at the cap only once it had passed it: with a cap
 * above 2^62 ms the 63rd doubling overflowed (signed: undefined; in practice
 * a negative wait). The session's cap is 10 s, but the header promises any. */
static void a_huge_cap_does_not_overflow_the_doubling(void) {
    mql_backoff b;
    int n;
    mql_backoff_init(&b, 1, INT64_MAX);
    for (n = 0; n < 70; n++) {
        int64_t w = mql_backoff_next(&b, (uint64_t)n);
        CHECK(w >= 0);
    }
    CHECK(mql_backoff_next(&b, 0) >= INT64_MAX / 4);   /* at the cap: half of it at least */
}

int main(void) {
    RUN(waits_double_from_the_base_within_their_jitter);
    RUN(the_random_number_picks_the_point_in_the_range);
    RUN(waits_never_pass_the_cap_however_long_it_fails);
    RUN(a_success_makes_the_next_wait_short_again);
    RUN(jitter_spreads_a_fleet_that_lost_the_same_proxy);
    RUN(nonsense_settings_are_made_sane);
    RUN(a_huge_cap_does_not_overflow_the_doubling);
    return TEST_REPORT("backoff");
}
