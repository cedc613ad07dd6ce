/* mql.h -- what every file of the mqlease C core shares.
 *
 * The core is plain C with no lua.h: it owns the network (grpc C core), the
 * lease table and the renewal timer, and talks to its host only through an
 * event queue and a file descriptor (see mql_events.h). Only the binding in
 * src/lua knows about Lua: its four files (lmqlease.c, lmql_push.c,
 * lmql_redis.c, lmql_signals.c) see lua.h through lmqlease.h, which includes
 * lmql_compat.h; spec/support/check-layers.sh keeps lua.h out of every other
 * folder.
 *
 * Limits below may be overridden at build time with -DMQL_...=N.
 */
#ifndef MQL_H
#define MQL_H

#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#define MQL_VERSION "0.1.0"

/* The proxy clamps a receive batch to 32 (ProxyUtils.MAX_MSG_NUMS_FOR_POP_REQUEST). */
#if !defined(MQL_MAX_BATCH)
#define MQL_MAX_BATCH 32
#endif

/* The longest message id the core takes (bytes). RocketMQ keeps a message's
 * id in its properties (MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX),
 * which its store refuses past Short.MAX_VALUE bytes (CommitLog's
 * PROPERTIES_SIZE_EXCEEDED), so no broker sends a longer one; and a binding
 * may keep an id's length in 16 bits (src/lua/lmql_message.c does). */
#if !defined(MQL_MESSAGE_ID_MAX)
#define MQL_MESSAGE_ID_MAX 32767
#endif

/* The most fields one ReceiveMessage or Telemetry frame may have, counted at
 * every depth (a packed element, a map entry and each of its key and value
 * count one each). protobuf-c allocates for each before anyone can look: an
 * empty map entry is 2 bytes on the wire and a message and a pointer once
 * unpacked, so the channel's largest frame (~130 MiB) could cost gigabytes.
 * What RocketMQ stores bounds an honest frame: the user properties and the
 * keys live in one properties string, refused past Short.MAX_VALUE bytes
 * (CommitLog's PROPERTIES_SIZE_EXCEEDED; see MQL_MESSAGE_ID_MAX), where each
 * property costs at least its two separators and each key one, so a stored
 * message has at most 16,383 properties (3 fields each) or 32,767 keys: under
 * 50,000 fields with the few dozen the rest of a message has. Twice and a
 * half that leaves the proxy room for properties of its own. */
#if !defined(MQL_FRAME_FIELDS_MAX)
#define MQL_FRAME_FIELDS_MAX 131072
#endif

/* Error strings carried in results and events; longer texts are cut. */
#if !defined(MQL_ERRLEN)
#define MQL_ERRLEN 256
#endif

/* Codes are short stable names: RocketMQ's own Code names (TOPIC_NOT_FOUND,
 * INVALID_RECEIPT_HANDLE, ...), grpc's transport failures mapped to a few
 * words (UNAVAILABLE, TIMEOUT), or local ones (CLOSED, ACKED, ...). */
#define MQL_CODELEN 48

/* The outcome of one operation. ok != 0 means success and the strings are empty. */
typedef struct mql_result {
    int ok;
    char code[MQL_CODELEN];
    char msg[MQL_ERRLEN];
} mql_result;

void mql_result_ok(mql_result *r);
void mql_result_fail(mql_result *r, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Monotonic milliseconds, for every deadline and timer in the core. */
int64_t mql_now_ms(void);
/* Wall-clock milliseconds since the epoch, only for what goes on the wire. */
int64_t mql_wall_ms(void);

/* Saturating time arithmetic for every duration or timestamp a peer sends
 * (protobuf Duration/Timestamp: int64 seconds + int32 nanos). A hostile or
 * buggy value must not overflow: signed overflow is undefined behaviour and
 * the sanitizer build aborts on it. Results stay within +-MQL_MS_MAX, so the
 * sum of two of them still fits. Shared by the client and the dev broker:
 * convert with these, never with seconds * 1000. */
#define MQL_MS_MAX (INT64_MAX / 2)
/* seconds + nanos as ms, clamped to [0, MQL_MS_MAX] (a negative duration is 0). */
int64_t mql_duration_ms(int64_t seconds, int32_t nanos);
/* seconds + nanos since the epoch as ms, clamped to [-MQL_MS_MAX, MQL_MS_MAX]. */
int64_t mql_timestamp_ms(int64_t seconds, int32_t nanos);
/* a + b clamped to [-MQL_MS_MAX, MQL_MS_MAX], for deadlines such as now + duration. */
int64_t mql_add_ms(int64_t a, int64_t b);

/* Name of a RocketMQ v2 status code (20000 -> "OK"); "CODE_<n>" if unknown. */
const char *mql_code_name(int code, char *buf, size_t len);

/* Threads started with every signal blocked (signals belong to the host). */
void mql_signals_block(sigset_t *old);
void mql_signals_restore(const sigset_t *old);
int mql_thread_start(pthread_t *t, void *(*fn)(void *), void *arg);   /* 0 or -1 */

/* Abseil's debug-build mutex deadlock detection off, once a process; called before
 * grpc_init (mql_absl.c says why). 1 if it is off, 0 if this abseil has no switch. */
int mql_absl_quiet(void);

char *mql_strdup(const char *s);
void *mql_xmalloc(size_t n);     /* aborts on OOM: the core has no partial-failure path for it */
void *mql_xcalloc(size_t n, size_t size);

#endif /* MQL_H */
