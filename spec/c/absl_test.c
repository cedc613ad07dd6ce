/* absl_test.c -- abseil's deadlock detection is found and turned off (mql_absl.c).
 *
 * Debian 12's abseil (libabsl20220623, loaded here through grpc as in the
 * module) is built without NDEBUG, so its Mutex checks lock order on every
 * lock unless told not to; the switch must be found in the library that is
 * already loaded, and asking again must not look it up a second time. */
#include <grpc/grpc.h>

#include "mql.h"
#include "mql_test.h"

static void the_switch_is_found_in_the_loaded_abseil(void) {
    CHECK(mql_absl_quiet() == 1);
}

static void asking_again_gives_the_same_answer(void) {
    CHECK(mql_absl_quiet() == 1);
    CHECK(mql_absl_quiet() == 1);
}

static void grpc_starts_and_stops_after_it(void) {
    grpc_init();
    CHECK(grpc_is_initialized());
    grpc_shutdown();
}

int main(void) {
    RUN(the_switch_is_found_in_the_loaded_abseil);
    RUN(asking_again_gives_the_same_answer);
    RUN(grpc_starts_and_stops_after_it);
    return TEST_REPORT("absl");
}
