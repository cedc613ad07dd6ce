/* mql_test.h -- the few macros the server-free C tests share.
 *
 * Each spec/c/<area>_test.c is one program: its main() calls test functions
 * through RUN(), each test uses CHECK() for what it asserts, and main() ends
 * with TEST_REPORT(), which prints the closing "N passed, N failed" line that
 * `make check` adds up, and returns non-zero on any failure. A CHECK that fails
 * prints where and goes on, so one run shows every failure.
 */
#ifndef MQL_TEST_H
#define MQL_TEST_H

#include <stdio.h>

static int mql_test_failed_checks;
static int mql_test_passed, mql_test_failed;

#define CHECK(cond)                                                              \
    do {                                                                         \
        if (!(cond)) {                                                           \
            fprintf(stderr, "  %s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
            mql_test_failed_checks++;                                            \
        }                                                                        \
    } while (0)

#define RUN(fn)                                                                  \
    do {                                                                         \
        int before_ = mql_test_failed_checks;                                    \
        fn();                                                                    \
        if (mql_test_failed_checks == before_) {                                 \
            mql_test_passed++;                                                   \
        } else {                                                                 \
            mql_test_failed++;                                                   \
            fprintf(stderr, "FAIL %s\n", #fn);                                   \
        }                                                                        \
    } while (0)

#define TEST_REPORT(name)                                                        \
    (printf("%s: %d passed, %d failed\n", (name), mql_test_passed, mql_test_failed), \
     mql_test_failed != 0)

#endif /* MQL_TEST_H */
