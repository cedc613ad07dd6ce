/* lmql_redis_reply_fuzz.c -- libFuzzer target for the way from what a Redis
 * server sends to the Lua value a script sees: any bytes go through hiredis's
 * RESP reader, mql_reply_copy (the core's copy, done on the Redis thread) and
 * lmql_push_reply (the binding, on the Lua thread). Nothing may crash, leak,
 * overflow the Lua stack on nested arrays, or lose an element. */
#include <hiredis/hiredis.h>
#include <lauxlib.h>
#include <lualib.h>
#include <stdint.h>
#include <stdlib.h>

#include "lmqlease.h"
#include "mql_redis.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The pushed value must mirror the reply: same type family, same length. */
static void check(lua_State *L, const mql_reply *r) {
    if (r->type == MQL_REPLY_ARRAY) {
        if (!lua_istable(L, -1) || lua_rawlen(L, -1) != r->nelements) abort();
    } else if (r->type == MQL_REPLY_INTEGER) {
        if (!lua_isnumber(L, -1)) abort();
    } else if (r->type != MQL_REPLY_NIL) {
        size_t len = 0;
        if (!lua_isstring(L, -1)) abort();
        lua_tolstring(L, -1, &len);
        if (len != r->len) abort();
    }
}

static int push(lua_State *L) {
    const mql_reply *r = lua_touserdata(L, 1);
    lmql_push_reply(L, r);
    check(L, r);
    return 1;
}

/* hiredis 0.14 allocates an array's element pointers as soon as it reads the
 * header, before any element arrives (1.0 added a maxelements limit): a
 * header of a billion elements is an 8 GB calloc inside hiredis, not in our
 * code. Such headers (7 digits or more) are skipped; README says so. */
static int huge_header(const uint8_t *data, size_t size) {
    size_t i, digits;
    for (i = 0; i + 1 < size; i++) {
        if (data[i] != '*') continue;
        for (digits = 0; i + 1 + digits < size && data[i + 1 + digits] >= '0' &&
                         data[i + 1 + digits] <= '9';
             digits++) {
        }
        if (digits >= 7) return 1;
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    redisReader *reader;
    void *reply = NULL;
    if (huge_header(data, size)) return 0;
    reader = redisReaderCreate();
    redisReaderFeed(reader, (const char *)data, size);
    while (redisReaderGetReply(reader, &reply) == REDIS_OK && reply) {
        mql_reply copy;
        lua_State *L = luaL_newstate();
        mql_reply_copy(&copy, reply);
        freeReplyObject(reply);
        reply = NULL;
        lua_pushcfunction(L, push);
        lua_pushlightuserdata(L, &copy);
        lua_pcall(L, 1, 1, 0);   /* an error (e.g. out of stack) is fine; a crash is not */
        lua_close(L);
        mql_reply_clear(&copy);
    }
    redisReaderFree(reader);
    return 0;
}
