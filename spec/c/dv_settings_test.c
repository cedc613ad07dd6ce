/* dv_settings_test.c -- a setting the control port (or a --flag) is given is
 * stored as given or refused: a count or a duration with a fraction is not
 * silently truncated to another value while the answer echoes the one sent. */
#include <string.h>

#include "dv_command.h"
#include "mql_test.h"

static int set(dv_faults *f, const char *key, const char *value) {
    char err[160];
    return dv_faults_set(f, key, value, err, sizeof(err));
}

/* `set max_renewals 1.5` answered "ok max_renewals=1.5" and stored 1;
 * `-0.5` stored 0 (every renewal refused) where -1 means no cap. */
static void refuses_a_count_with_a_fraction(void) {
    dv_faults f;
    dv_faults_init(&f);
    CHECK(set(&f, "max_renewals", "1.5") < 0 && f.max_renewals == -1);
    CHECK(set(&f, "max_renewals", "-0.5") < 0 && f.max_renewals == -1);
    CHECK(set(&f, "tx_check_max", "2.5") < 0 && f.tx_check_max == 15);
    CHECK(set(&f, "max_renewals", "3") == 0 && f.max_renewals == 3);
    CHECK(set(&f, "max_renewals", "-1") == 0 && f.max_renewals == -1);
    CHECK(set(&f, "max_renewals", "2.0") == 0 && f.max_renewals == 2);   /* what Lua's tostring of 2.0 sends */
}

/* `set delay_change_ms 0.9` stored 0: the fault was off while the answer said it was on. */
static void refuses_milliseconds_with_a_fraction(void) {
    dv_faults f;
    dv_faults_init(&f);
    CHECK(set(&f, "delay_change_ms", "0.9") < 0 && f.delay_change_ms == 0);
    CHECK(set(&f, "min_invisible_ms", "999.5") < 0 && f.min_invisible_ms == 10000);
    CHECK(set(&f, "delay_change_ms", "1500.0") == 0 && f.delay_change_ms == 1500);
    CHECK(set(&f, "delay_change_ms", "1e3") == 0 && f.delay_change_ms == 1000);
}

int main(void) {
    RUN(refuses_a_count_with_a_fraction);
    RUN(refuses_milliseconds_with_a_fraction);
    return TEST_REPORT("dv_settings_test");
}
