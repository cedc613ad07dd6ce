/* dv_settings_test.c -- a setting the control port (or a --flag) is given is
 * stored as given or refused: a count or a duration with a fraction is not
 * silently truncated to another value while the answer echoes the one sent,
 * and a value outside the setting's own range is refused by name. */
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

/* The answer to a refused value, for what it says. */
static const char *refusal(dv_faults *f, const char *key, const char *value) {
    static char err[160];
    err[0] = '\0';
    if (dv_faults_set(f, key, value, err, sizeof(err)) == 0) return "";
    return err;
}

/* Each setting has a range of its own, not its kind's: `set control_timeout_ms 0`
 * was taken, and the control port then dropped every client the moment it
 * connected (silent for 0 ms), itself included: nothing could set it back;
 * `set tx_check_max -1` (the -1 meant for max_renewals' "no cap") was taken
 * and read as "dropped at the first check". A refusal names the setting and
 * what it takes. */
static void refuses_a_value_outside_its_own_range(void) {
    dv_faults f;
    dv_faults_init(&f);
    CHECK(set(&f, "control_timeout_ms", "0") < 0 && f.control_timeout_ms == 30000);
    CHECK(set(&f, "control_timeout_ms", "99") < 0 && f.control_timeout_ms == 30000);
    CHECK(strstr(refusal(&f, "control_timeout_ms", "0"),
                 "'control_timeout_ms': '0' (whole milliseconds from 100 to 86400000)") != NULL);
    CHECK(set(&f, "control_timeout_ms", "100") == 0 && f.control_timeout_ms == 100);
    CHECK(set(&f, "tx_check_max", "-1") < 0 && f.tx_check_max == 15);
    CHECK(strstr(refusal(&f, "tx_check_max", "-1"),
                 "'tx_check_max': '-1' (a whole number from 0 to 1000000)") != NULL);
    CHECK(set(&f, "tx_check_max", "0") == 0 && f.tx_check_max == 0);
    /* past the 12 h a receive may ask for, every receive would be refused */
    CHECK(set(&f, "min_invisible_ms", "43200001") < 0 && f.min_invisible_ms == 10000);
    CHECK(set(&f, "min_invisible_ms", "43200000") == 0 && f.min_invisible_ms == 43200000);
    CHECK(set(&f, "max_renewals", "-2") < 0 && f.max_renewals == -1);
    CHECK(strstr(refusal(&f, "corrupt_digest", "1.5"), "(a share from 0 to 1)") != NULL);
    CHECK(strstr(refusal(&f, "paused", "2"), "(0 or 1)") != NULL);
    CHECK(strstr(refusal(&f, "digest", "sha256"), "(md5, crc32 or sha1)") != NULL);
}

int main(void) {
    RUN(refuses_a_count_with_a_fraction);
    RUN(refuses_milliseconds_with_a_fraction);
    RUN(refuses_a_value_outside_its_own_range);
    return TEST_REPORT("dv_settings_test");
}
