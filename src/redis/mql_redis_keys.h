/* mql_redis_keys.h -- the exactly-once policy's key layout, built in the core.
 *
 * A message's keys are prefix{<id>}:<suffix> (lock, fence, done). The braces
 * are a Redis Cluster hash tag, so the keys of one message share one slot.
 * Redis hashes what lies between the first '{' and the first '}' after it,
 * and the whole key when that is empty: the keys of an empty id, or of one
 * that starts with '}', would land in different slots. Those ids are written
 * '%' and their bytes in hex, and their keys end in }%:<suffix> where every
 * other id's end in }:<suffix>, so no other id's keys can be theirs.
 * mqlease.policy.key_base writes the same keys in Lua; a spec holds them equal.
 */
#ifndef MQL_REDIS_KEYS_H
#define MQL_REDIS_KEYS_H

#include <stddef.h>

/* The bytes of id's key with suffix under prefix. */
size_t mql_eo_key_len(size_t prefix_len, const char *id, size_t id_len, size_t suffix_len);
/* Writes that key to out (mql_eo_key_len bytes, no terminator); returns its length. */
size_t mql_eo_key(char *out, const char *prefix, size_t prefix_len, const char *id, size_t id_len,
                  const char *suffix, size_t suffix_len);

#endif /* MQL_REDIS_KEYS_H */
