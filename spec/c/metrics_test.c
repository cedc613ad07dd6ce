/* metrics_test.c -- the error table and histograms without a server. */
#include <stdio.h>
#include <string.h>

#include "mql_metrics.h"
#include "mql_test.h"

static void counts_repeats_of_one_kind_in_one_slot(void) {
    mql_metrics m;
    memset(&m, 0, sizeof(m));
    mql_metrics_error(&m, "ack", "TIMEOUT");
    mql_metrics_error(&m, "ack", "TIMEOUT");
    mql_metrics_error(&m, "renew", "TIMEOUT");
    CHECK(m.nerrors == 2);
    CHECK(m.errors[0].n == 2);
    CHECK(strcmp(m.errors[1].op, "renew") == 0);
}

static void folds_overflow_into_other_without_renaming_a_kind(void) {
    mql_metrics m, listed;
    char code[16];
    int i, kept = 1;
    memset(&m, 0, sizeof(m));
    for (i = 0; i < MQL_MAX_ERROR_KINDS; i++) {
        snprintf(code, sizeof(code), "C%d", i);
        mql_metrics_error(&m, "op", code);
    }
    listed = m;   /* what a scrape showed at this moment */
    for (; i < MQL_MAX_ERROR_KINDS + 3; i++) {
        snprintf(code, sizeof(code), "C%d", i);
        mql_metrics_error(&m, "op", code);
    }
    /* a kind once shown keeps its name, and its count never goes down */
    for (i = 0; i < listed.nerrors; i++)
        if (strcmp(listed.errors[i].code, m.errors[i].code) != 0 ||
            m.errors[i].n < listed.errors[i].n)
            kept = 0;
    CHECK(kept);
    CHECK(m.nerrors == MQL_MAX_ERROR_KINDS);
    CHECK(strcmp(m.errors[MQL_MAX_ERROR_KINDS - 1].code, "OTHER") == 0);
    CHECK(m.errors[MQL_MAX_ERROR_KINDS - 1].n == 4);   /* C31, C32, C33, C34 */
}

/* Issue 20 item 12: the reason tables (corrupted, malformed, dead-lettered)
 * renamed their last slot to "other" when full, so a reason a scrape had
 * shown lost its name and its count went into "other" (a counter that goes
 * down, and one that jumps). The last slot is kept for "other" from the
 * start, as the error table does, and a reason spelt "other" lands there too
 * (never two series with one label). */
static void folds_reasons_past_the_table_into_other_without_renaming_one(void) {
    mql_reason_table t, shown;
    char reason[16];
    int i, kept = 1, others = 0;
    memset(&t, 0, sizeof(t));
    for (i = 0; i < MQL_MAX_REASONS; i++) {
        snprintf(reason, sizeof(reason), "r%d", i);
        mql_metrics_reason(&t, reason);
    }
    shown = t;   /* what a scrape showed at this moment */
    for (; i < MQL_MAX_REASONS + 3; i++) {
        snprintf(reason, sizeof(reason), "r%d", i);
        mql_metrics_reason(&t, reason);
    }
    mql_metrics_reason(&t, "other");
    for (i = 0; i < shown.n; i++)
        if (strcmp(shown.r[i].reason, t.r[i].reason) != 0 || t.r[i].n < shown.r[i].n) kept = 0;
    CHECK(kept);
    CHECK(t.n == MQL_MAX_REASONS);
    for (i = 0; i < t.n; i++) others += strcmp(t.r[i].reason, "other") == 0;
    CHECK(others == 1);
    CHECK(strcmp(t.r[MQL_MAX_REASONS - 1].reason, "other") == 0);
    CHECK(t.r[MQL_MAX_REASONS - 1].n == 5);   /* r11..r14 and "other" itself */
}

static void puts_each_observation_in_its_bucket(void) {
    mql_hist h;
    memset(&h, 0, sizeof(h));
    mql_hist_observe(&h, 0.0005);
    mql_hist_observe(&h, 0.001);
    mql_hist_observe(&h, 7200);
    CHECK(h.counts[0] == 2);
    CHECK(h.counts[MQL_HIST_BUCKETS] == 1);   /* +Inf */
    CHECK(h.count == 3);
}

int main(void) {
    RUN(counts_repeats_of_one_kind_in_one_slot);
    RUN(folds_overflow_into_other_without_renaming_a_kind);
    RUN(folds_reasons_past_the_table_into_other_without_renaming_one);
    RUN(puts_each_observation_in_its_bucket);
    return TEST_REPORT("metrics_test");
}
