/* mql_util.c -- results, clocks and allocation helpers shared by the core. */
#include "mql.h"

#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "apache/rocketmq/v2/definition.pb-c.h"

void mql_result_ok(mql_result *r) {
    r->ok = 1;
    r->code[0] = '\0';
    r->msg[0] = '\0';
}

void mql_result_fail(mql_result *r, const char *code, const char *fmt, ...) {
    va_list ap;
    r->ok = 0;
    snprintf(r->code, sizeof(r->code), "%s", code);
    va_start(ap, fmt);
    vsnprintf(r->msg, sizeof(r->msg), fmt, ap);
    va_end(ap);
}

int64_t mql_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t mql_wall_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int64_t clamp_ms(int64_t v, int64_t lo) {
    return v > MQL_MS_MAX ? MQL_MS_MAX : v < lo ? lo : v;
}

/* |seconds| is capped first, so seconds * 1000 + nanos / 10^6 cannot overflow. */
static int64_t to_ms(int64_t seconds, int32_t nanos, int64_t lo) {
    if (seconds > MQL_MS_MAX / 1000) return MQL_MS_MAX;
    if (seconds < -(MQL_MS_MAX / 1000)) return lo;
    return clamp_ms(seconds * 1000 + nanos / 1000000, lo);
}

int64_t mql_duration_ms(int64_t seconds, int32_t nanos) { return to_ms(seconds, nanos, 0); }

int64_t mql_timestamp_ms(int64_t seconds, int32_t nanos) { return to_ms(seconds, nanos, -MQL_MS_MAX); }

int64_t mql_add_ms(int64_t a, int64_t b) {
    int64_t sum;
    if (__builtin_add_overflow(a, b, &sum)) return a > 0 ? MQL_MS_MAX : -MQL_MS_MAX;
    return clamp_ms(sum, -MQL_MS_MAX);
}

const char *mql_code_name(int code, char *buf, size_t len) {
    const ProtobufCEnumValue *v =
        protobuf_c_enum_descriptor_get_value(&apache__rocketmq__v2__code__descriptor, code);
    if (v) return v->name;
    snprintf(buf, len, "CODE_%d", code);
    return buf;
}

void *mql_xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "mqlease: out of memory (%zu bytes)\n", n);
        abort();
    }
    return p;
}

void *mql_xcalloc(size_t n, size_t size) {
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) {
        fprintf(stderr, "mqlease: out of memory (%zu x %zu bytes)\n", n, size);
        abort();
    }
    return p;
}

char *mql_strdup(const char *s) {
    size_t n;
    char *d;
    if (!s) return NULL;
    n = strlen(s) + 1;
    d = mql_xmalloc(n);
    memcpy(d, s, n);
    return d;
}

/* Threads of the core must never take the host's signals (SIGTERM belongs to
 * the host's drain); grpc's own threads inherit the mask of whoever starts
 * them, so callers block around grpc_init and channel creation too. */
void mql_signals_block(sigset_t *old) {
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, old);
}

void mql_signals_restore(const sigset_t *old) {
    pthread_sigmask(SIG_SETMASK, old, NULL);
}

int mql_thread_start(pthread_t *t, void *(*fn)(void *), void *arg) {
    sigset_t old;
    int rc;
    mql_signals_block(&old);
    rc = pthread_create(t, NULL, fn, arg);
    mql_signals_restore(&old);
    return rc == 0 ? 0 : -1;
}
