/* renew_pace_test.c -- renewal pacing without a server: where renewals land
 * when many leases arrive at once, the latest safe renewal under a slow
 * broker, and the cap on renewals in flight (mql_pace.h). */
#include <stdlib.h>
#include <string.h>

#include "mql_pace.h"
#include "mql_test.h"

#define INVISIBLE 60000
#define EVERY (INVISIBLE / 3)

/* A lease renews at its own phase: never before 0.9 x every after its
 * receive, at most one period after that, and then once a period. */
static void a_lone_lease_renews_at_its_phase_once_a_period(void) {
    mql_pace p;
    int64_t phase, first, next;
    mql_pace_init(&p, INVISIBLE, 0);
    CHECK(p.every_ms == EVERY);
    phase = mql_pace_phase_ms(&p, 7);
    CHECK(phase >= 0 && phase < EVERY);
    first = mql_pace_first_at(&p, 1000, 1000 + INVISIBLE, 7);
    CHECK(first >= 1000 + EVERY - EVERY / 10);
    CHECK(first < 1000 + 2 * EVERY - EVERY / 10);
    CHECK(first % EVERY == phase);
    /* on time: exactly one period later */
    next = mql_pace_next_at(&p, first, first + INVISIBLE, 7);
    CHECK(next == first + EVERY);
    /* late by a quarter period: back at its phase, not a period after the send */
    CHECK(mql_pace_next_at(&p, next + EVERY / 4, next + EVERY / 4 + INVISIBLE, 7) ==
          next + EVERY);
    /* late by more than half a period: the phase after the next */
    CHECK(mql_pace_next_at(&p, next + EVERY * 3 / 4, next + EVERY * 3 / 4 + INVISIBLE, 7) ==
          next + 2 * EVERY);
}

/* 100,000 leases received within 3 s: their renewals must not come as a burst
 * (then or in any later period), nor early, nor later than the latest safe time. */
static void a_burst_of_receives_renews_evenly_over_the_period(void) {
    mql_pace p;
    static int per_second[3 * INVISIBLE / 1000];
    int i, busiest = 0, quietest = 1 << 30, too_late = 0, too_early = 0;
    memset(per_second, 0, sizeof(per_second));
    mql_pace_init(&p, INVISIBLE, 0);
    p.salt = 12345;
    for (i = 0; i < 100000; i++) {
        int64_t acquired = (int64_t)i * 3000 / 100000;
        int64_t deadline = acquired + INVISIBLE;
        int64_t at = mql_pace_first_at(&p, acquired, deadline, (uint64_t)i + 1);
        int64_t next = mql_pace_next_at(&p, at, at + INVISIBLE, (uint64_t)i + 1);
        if (at > deadline - INVISIBLE / 3) too_late++;
        if (at < acquired + EVERY - EVERY / 10) too_early++;
        if (next != at + EVERY) too_late++;
        per_second[(next % EVERY) / 1000]++;   /* the steady state's phase */
    }
    for (i = 0; i < EVERY / 1000; i++) {
        if (per_second[i] > busiest) busiest = per_second[i];
        if (per_second[i] < quietest) quietest = per_second[i];
    }
    CHECK(too_late == 0);
    CHECK(too_early == 0);
    /* 5,000 a second on average: within a percent either way */
    CHECK(busiest <= 5050);
    CHECK(quietest >= 4950);
}

/* Two clients salt their phases differently. */
static void the_salt_moves_the_phases(void) {
    mql_pace a, b;
    mql_pace_init(&a, INVISIBLE, 0);
    mql_pace_init(&b, INVISIBLE, 0);
    a.salt = 1;
    b.salt = UINT64_C(1) << 63;
    CHECK(mql_pace_phase_ms(&a, 1) != mql_pace_phase_ms(&b, 1));
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
    /* no later than the latest safe time, whatever the phase */
    CHECK(mql_pace_next_at(&p, 0, 30000, 0) <= 25000);
    CHECK(mql_pace_next_at(&p, 0, 30000, 0) >= 12500);
    CHECK(mql_pace_first_at(&p, 0, 30000, 0) <= 25000);
    CHECK(mql_pace_first_at(&p, 0, 30000, 0) >= 22500);
}

/* A period no shorter than the window (renew_every 1.0001 s and invisible
 * 1.0005 s are both 1000 ms) cannot be kept: it left no margin, so nearly
 * every lease's renewal fell on its deadline, where a renewal is no longer
 * sent, and the lease was lost. Such a period keeps the default margin. */
static void a_period_as_long_as_the_window_still_renews_before_the_deadline(void) {
    mql_pace p;
    uint64_t key;
    int at_deadline = 0;
    mql_pace_init(&p, 1000, 1000);
    CHECK(mql_pace_margin_ms(&p) == 1000 / 3);
    for (key = 1; key <= 1000; key++) {
        if (mql_pace_first_at(&p, 0, 1000, key) > 1000 - 1000 / 3) at_deadline++;
        if (mql_pace_next_at(&p, 0, 1000, key) > 1000 - 1000 / 3) at_deadline++;
    }
    CHECK(at_deadline == 0);
    mql_pace_init(&p, 1000, 5000);   /* longer still: the same */
    CHECK(mql_pace_margin_ms(&p) == 1000 / 3);
}

static void renewals_go_out_together_at_most_a_sixty_fourth_of_the_period_early(void) {
    mql_pace p;
    mql_pace_init(&p, 1200, 0);   /* every 400 ms */
    CHECK(mql_pace_slack_ms(&p) == 6);
    mql_pace_init(&p, 120000, 0);   /* every 40 s: capped */
    CHECK(mql_pace_slack_ms(&p) == MQL_PACE_SLACK_MAX_MS);
    /* an early send does not move the phase: the next renewal is a period
     * after the time it was due */
    {
        int64_t due = mql_pace_first_at(&p, 0, 120000, 3);
        CHECK(mql_pace_next_at(&p, due - mql_pace_slack_ms(&p), due + 120000, 3) == due + 40000);
    }
}

static void no_more_renewals_start_than_the_cap_allows(void) {
    mql_pace p;
    mql_pace_init(&p, INVISIBLE, 0);
    CHECK(mql_pace_may_start(&p, 0, 0) == MQL_PACE_MAX_INFLIGHT);
    CHECK(mql_pace_may_start(&p, MQL_PACE_MAX_INFLIGHT - 1, 0) == 1);
    CHECK(mql_pace_may_start(&p, MQL_PACE_MAX_INFLIGHT, 0) == 0);
    CHECK(mql_pace_may_start(&p, MQL_PACE_MAX_INFLIGHT + 5, 0) == 0);
}

/* Behind, twice the bound: the queue a fill made due drains into the broker,
 * where the margin (K x p99 latency) covers the wait; caught up, the renewals
 * over the bound finish and no new one starts until they have. */
static void behind_twice_as_many_renewals_may_be_in_flight(void) {
    mql_pace p;
    int most = MQL_PACE_MAX_INFLIGHT * MQL_PACE_BEHIND_INFLIGHT;
    mql_pace_init(&p, INVISIBLE, 0);
    CHECK(most == 2 * MQL_PACE_MAX_INFLIGHT);
    CHECK(mql_pace_may_start(&p, 0, 1) == most);
    CHECK(mql_pace_may_start(&p, MQL_PACE_MAX_INFLIGHT, 1) == most - MQL_PACE_MAX_INFLIGHT);
    CHECK(mql_pace_may_start(&p, most, 1) == 0);
    CHECK(mql_pace_may_start(&p, most - 1, 0) == 0);   /* caught up: none until below the bound */
    p.max_inflight = 3;                                   /* the bound a test or a user sets */
    CHECK(mql_pace_may_start(&p, 3, 1) == 3);
}

int main(void) {
    RUN(a_lone_lease_renews_at_its_phase_once_a_period);
    RUN(a_burst_of_receives_renews_evenly_over_the_period);
    RUN(the_salt_moves_the_phases);
    RUN(a_slow_broker_moves_the_latest_renewal_earlier);
    RUN(a_very_slow_broker_still_leaves_a_tenth_of_the_window);
    RUN(the_p99_follows_the_broker_when_it_recovers);
    RUN(a_later_renew_every_keeps_its_own_margin);
    RUN(a_period_as_long_as_the_window_still_renews_before_the_deadline);
    RUN(renewals_go_out_together_at_most_a_sixty_fourth_of_the_period_early);
    RUN(no_more_renewals_start_than_the_cap_allows);
    RUN(behind_twice_as_many_renewals_may_be_in_flight);
    return TEST_REPORT("renew_pace_test");
}
