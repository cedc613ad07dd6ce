/* mql_redis_keys.c -- the exactly-once policy's key layout (see mql_redis_keys.h). */
#include "mql_redis_keys.h"

#include <string.h>

/* An id written as it is: not empty, and not starting with '}'. */
static int id_as_is(const char *id, size_t id_len) {
    return id_len > 0 && id[0] != '}';
}

size_t mql_eo_key_len(size_t prefix_len, const char *id, size_t id_len, size_t suffix_len) {
    if (id_as_is(id, id_len)) return prefix_len + 1 + id_len + 2 + suffix_len;   /* {id}: */
    return prefix_len + 2 + 2 * id_len + 3 + suffix_len;                          /* {%hex}%: */
}

size_t mql_eo_key(char *out, const char *prefix, size_t prefix_len, const char *id, size_t id_len,
                  const char *suffix, size_t suffix_len) {
    static const char digits[] = "0123456789abcdef";
    char *p = out;
    size_t i;
    memcpy(p, prefix, prefix_len);
    p += prefix_len;
    *p++ = '{';
    if (id_as_is(id, id_len)) {
        memcpy(p, id, id_len);
        p += id_len;
        *p++ = '}';
    } else {
        *p++ = '%';
        for (i = 0; i < id_len; i++) {
            unsigned char c = (unsigned char)id[i];
            *p++ = digits[c >> 4];
            *p++ = digits[c & 15];
        }
        *p++ = '}';
        *p++ = '%';
    }
    *p++ = ':';
    memcpy(p, suffix, suffix_len);
    p += suffix_len;
    return (size_t)(p - out);
}
