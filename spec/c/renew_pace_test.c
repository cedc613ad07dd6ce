/* renew_pace_test.c -- renewal pacing without a server: where first renewals
 * land when many leases arrive at once, the latest safe renewal under a slow
 * broker, and the cap on renewals in flight (mql_pace.h). */
#include <stdlib.h>
#include <string.h>

#include "mql_pace.h"
#include "mql_test.h"

#define INVISIBLE 60000
#define EVERY (INVISIBLE / 3)

static void a_lone_lease_renews_at_the_preferred_time(void) {
    mql_pace p;
    mql_pace_init(&p, INVISIBLE, 0);
    CHECK(p.every_ms == EVERY);
    CHECK(mql_pace_first_at(&p, 1000, 1000 + INVISIBLE, 0) == 1000 + EVERY);
    /* one received a minute later is not held back by the first */
    CHECK(mql_pace_first_at(&p, 61000, 61000 + INVISIBLE, 0) == 61000 + EVERY);
}

/* 100,000 leases received within 3 s: their first renewals must not come as a
 * burst, nor any later than a third of the window before the deadline. */
static void a_burst_of_receives_spreads_over_the_safe_part_of_the_window(void) {
    mql_pace p;
    static int per_second[INVISIBLE / 1000 + 1];
    int i, busiest = 0, too_late = 0, too_early = 0;
    memset(per_second, 0, sizeof(per_second));
    mql_pace_init(&p, INVISIBLE, 0);
    for (i = 0; i < 100000; i++) {
        int64_t acquired = (int64_t)i * 3000 / 100000;
        int64_t deadline = acquired + INVISIBLE;
        int64_t at = mql_pace_first_at(&p, acquired, deadline, 0);
        if (at > deadline - INVISIBLE / 3) too_late++;
        if (at < acquired + EVERY) too_early++;
        per_second[at / 1000]++;
    }
    for (i = 0; i <= INVISIBLE / 1000; i++)
        if (per_second[i] > busiest) busiest = per_second[i];
    CHECK(too_late == 0);
    CHECK(too_early == 0);
    CHECK(busiest <= 1000000 / MQL_PACE_SPACING_US + 1);   /* <= 5,000 per second */
}

/* More leases than slots: the rest renew at the latest safe time, never later. */
static void an_overload_renews_at_the_latest_safe_time(void) {
    mql_pace p;
    int i, at_latest = 0, later = 0;
    mql_pace_init(&p, 15000, 0);   /* 5 s of slack: 25,000 slots */
    for (i = 0; i < 40000; i++) {
        int64_t at = mql_pace_first_at(&p, 0, 15000, 0);
        if (at == 10000) at_latest++;
        if (at > 10000) later++;
    }
    CHECK(later == 0);
    CHECK(at_latest >= 40000 - 25001);
}

static void a_slow_broker_moves_the_latest_renewal_earlier(void) {
    mql_pace p;
    int i;
    mql_pace_init(&p, 30000, 0);
    CHECK(mql_pace_margin_ms(&p) == 10000);
    for (i = 0; i < 1000; i++) mql_pace_observe(&p, 4000);   /* p99 ~ 4 s */
    CHECK(p.p99_ms >= 4000);
    CHECK(mql_pace_margin_ms(&p) >= MQL_PACE_P99_FACTOR * 4000);
    /* the renewal after a success comes before deadline - margin */
    CHECK(mql_pace_next_at(&p, 0, 30000, 0) <= 30000 - MQL_PACE_P99_FACTOR * 4000);
    /* and never later than the preferred period */
    CHECK(mql_pace_next_at(&p, 0, 30000, 0) <= 10000);
}

static void a_very_slow_broker_still_leaves_a_tenth_of_the_window(void) {
    mql_pace p;
    int i;
    mql_pace_init(&p, 30000, 0);
    for (i = 0; i < 1000; i++) mql_pace_observe(&p, 60000);
    CHECK(mql_pace_margin_ms(&p) == 30000 - 3000);
    CHECK(mql_pace_next_at(&p, 0, 30000, 0) == 3000);
}

static void the_p99_follows_the_broker_when_it_recovers(void) {
    mql_pace p;
    int i;
    mql_pace_init(&p, 30000, 0);
    for (i = 0; i < 1000; i++) mql_pace_observe(&p, 4000);
    for (i = 0; i < 20000; i++) mql_pace_observe(&p, 1);
    CHECK(p.p99_ms <= 2);
    CHECK(mql_pace_margin_ms(&p) == 10000);
}

static void a_later_renew_every_keeps_its_own_margin(void) {
    mql_pace p;
    mql_pace_init(&p, 30000, 25000);   /* renew_every = 25 s: 5 s left */
    CHECK(mql_pace_margin_ms(&p) == 5000);
    CHECK(mql_pace_next_at(&p, 0, 30000, 0) == 25000);
    CHECK(mql_pace_first_at(&p, 0, 30000, 0) == 25000);
}

static void jitter_makes_a_renewal_early_not_late(void) {
    mql_pace p;
    mql_pace_init(&p, INVISIBLE, 0);
    CHECK(mql_pace_next_at(&p, 5000, 5000 + INVISIBLE, 700) == 5000 + EVERY - 700);
    CHECK(mql_pace_first_at(&p, 5000, 5000 + INVISIBLE, 700) == 5000 + EVERY - 700);
}

static void no_more_renewals_start_than_the_cap_allows(void) {
    mql_pace p;
    mql_pace_init(&p, INVISIBLE, 0);
    CHECK(mql_pace_may_start(&p, 0) == MQL_PACE_MAX_INFLIGHT);
    CHECK(mql_pace_may_start(&p, MQL_PACE_MAX_INFLIGHT - 1) == 1);
    CHECK(mql_pace_may_start(&p, MQL_PACE_MAX_INFLIGHT) == 0);
    CHECK(mql_pace_may_start(&p, MQL_PACE_MAX_INFLIGHT + 5) == 0);
}

int main(void) {
    RUN(a_lone_lease_renews_at_the_preferred_time);
    RUN(a_burst_of_receives_spreads_over_the_safe_part_of_the_window);
    RUN(an_overload_renews_at_the_latest_safe_time);
    RUN(a_slow_broker_moves_the_latest_renewal_earlier);
    RUN(a_very_slow_broker_still_leaves_a_tenth_of_the_window);
    RUN(the_p99_follows_the_broker_when_it_recovers);
    RUN(a_later_renew_every_keeps_its_own_margin);
    RUN(jitter_makes_a_renewal_early_not_late);
    RUN(no_more_renewals_start_than_the_cap_allows);
    return TEST_REPORT("renew_pace_test");
}
