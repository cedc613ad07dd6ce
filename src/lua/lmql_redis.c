/* lmql_redis.c -- core.redis: the Redis client of the core for Lua (commands,
 * scripts and lock keepalives run on the client's own threads; see mql_redis.h). */
#include "lmqlease.h"

#include <stdlib.h>
#include <string.h>

#include "mql_redis.h"
#include "mql_redis_keys.h"

typedef struct lredis {
    mql_redis *r;
} lredis;

/* Given the client's userdata, as client:events()' hooks are (lmqlease.c):
 * a finalizer run while the events are made may close this client. */
static void requeue_redis_events(void *owner, mql_event *list) {
    lredis *lr = owner;
    if (lr->r) {
        mql_redis_requeue_events(lr->r, list);
        return;
    }
    lmql_free_events(list);
}

static mql_redis *check_redis(lua_State *L) {
    lredis *lr = luaL_checkudata(L, 1, REDIS_MT);
    if (!lr->r) luaL_error(L, "mqlease: the redis client is closed");
    return lr->r;
}

/* The strings of the array cfg[key] ("host:port" nodes); the table keeps them alive. */
static int opt_nodes(lua_State *L, int t, const char *key, const char **out, int max) {
    int n = 0;
    lua_pushstring(L, key);
    lua_rawget(L, t);   /* no metamethod: see lmql_opt_string */
    if (lua_istable(L, -1)) {
        for (n = 0; n < max; n++) {
            lua_rawgeti(L, -1, n + 1);
            if (lua_isnil(L, -1)) {
                lua_pop(L, 1);
                break;
            }
            out[n] = lmql_table_string(L, "a node");
            lua_pop(L, 1);
        }
    }
    lua_pop(L, 1);
    return n;
}

/* core.redis{host=, port=, unix=, username=, password=, db=, timeout_ms=,
 *            master=, sentinel_username=, sentinel_password=, cluster=,
 *            nodes={"h:p", ...}} -> client */
int lmql_redis(lua_State *L) {
    mql_redis_config cfg;
    const char *nodes[64];
    char err[128];
    lredis *lr;
    luaL_checktype(L, 1, LUA_TTABLE);
    memset(&cfg, 0, sizeof(cfg));
    cfg.nodes = nodes;
    cfg.nnodes = opt_nodes(L, 1, "nodes", nodes, 64);
    cfg.master = lmql_opt_string(L, 1, "master");
    cfg.sentinel_username = lmql_opt_string(L, 1, "sentinel_username");
    cfg.sentinel_password = lmql_opt_string(L, 1, "sentinel_password");
    cfg.cluster = lmql_opt_bool(L, 1, "cluster", 0);
    cfg.host = lmql_opt_string(L, 1, "host");
    cfg.port = (int)lmql_opt_int(L, 1, "port", 6379);
    cfg.unix_path = lmql_opt_string(L, 1, "unix");
    cfg.username = lmql_opt_string(L, 1, "username");
    cfg.password = lmql_opt_string(L, 1, "password");
    cfg.db = (int)lmql_opt_int(L, 1, "db", 0);
    cfg.timeout_ms = lmql_opt_int(L, 1, "timeout_ms", 1000);
    if (!cfg.host && !cfg.unix_path && !cfg.nnodes)
        return luaL_error(L, "mqlease.core.redis: host, unix or nodes is required");
    lr = lua_newuserdata(L, sizeof(*lr));
    lr->r = NULL;
    luaL_getmetatable(L, REDIS_MT);
    lua_setmetatable(L, -2);
    lr->r = mql_redis_new(&cfg, err, sizeof(err));
    if (!lr->r) return luaL_error(L, "mqlease.core.redis: %s", err);
    return 1;
}

/* Collects arguments from index first on as strings (numbers are converted). */
static int collect_args(lua_State *L, int first, const char **argv, size_t *lens, int max) {
    int top = lua_gettop(L), n = 0, i;
    for (i = first; i <= top; i++) {
        if (n == max) luaL_error(L, "mqlease: at most %d redis arguments", max);
        argv[n] = luaL_checklstring(L, i, &lens[n]);
        n++;
    }
    return n;
}

static int l_redis_command(lua_State *L) {
    mql_redis *r = check_redis(L);
    const char *argv[64];
    size_t lens[64];
    int n = collect_args(L, 2, argv, lens, 64);
    luaL_argcheck(L, n > 0, 2, "a command expected");
    lua_pushinteger(L, (lua_Integer)mql_redis_command(r, n, argv, lens));
    return 1;
}

/* r:eval(script, numkeys, keys..., args...) -> op */
static int l_redis_eval(lua_State *L) {
    mql_redis *r = check_redis(L);
    const char *script = luaL_checkstring(L, 2);
    int numkeys = (int)luaL_checkinteger(L, 3);
    const char *argv[64];
    size_t lens[64];
    int n = collect_args(L, 4, argv, lens, 64);
    luaL_argcheck(L, numkeys >= 0 && numkeys <= n, 3, "numkeys out of range");
    lua_pushinteger(L, (lua_Integer)mql_redis_eval(r, script, numkeys, n, argv, lens));
    return 1;
}

/* A command's arguments: the exactly-once policy sends the scripts of up to
 * 32 messages as one (mqlease.policy.batch), 130 arguments. */
#define PIPELINE_ARGS 1024

/* The most suffixes an eval_ids entry names per id (the policy's: lock,
 * fence, done). */
#define IDS_SUFFIXES 4

/* An eval_ids entry's keys: each id's key under prefix with each suffix
 * (mql_eo_key), written into one buffer that the caller frees once the
 * command is built (the command copies them). Raises on a bad suffix list
 * before allocating. Returns the key count; argv/lens get the keys. */
static int ids_keys(lua_State *L, int entry, int first_id, int nids, const char **argv,
                    size_t *lens, char **buf) {
    size_t plen, slen, bytes = 0, sl[IDS_SUFFIXES];
    const char *prefix, *suffixes, *sp[IDS_SUFFIXES], *q;
    int ns = 0, i, j, n = 0;
    char *p;
    lua_rawgeti(L, entry, 3);
    lua_rawgeti(L, entry, 4);
    /* strings only: lua_tolstring would convert a number in place, allocating,
     * and the build pass must not raise once commands are made */
    luaL_argcheck(L, lua_type(L, -2) == LUA_TSTRING && lua_type(L, -1) == LUA_TSTRING, 2,
                  "an eval_ids entry needs a prefix and suffixes (strings)");
    prefix = lua_tolstring(L, -2, &plen);
    suffixes = lua_tolstring(L, -1, &slen);
    luaL_argcheck(L, slen > 0, 2, "an eval_ids entry needs a prefix and suffixes (strings)");
    for (q = suffixes; q < suffixes + slen;) {   /* "lock fence done" */
        const char *e = memchr(q, ' ', (size_t)(suffixes + slen - q));
        if (!e) e = suffixes + slen;
        luaL_argcheck(L, e > q && ns < IDS_SUFFIXES, 2, "eval_ids: at most 4 suffixes, one space apart");
        sp[ns] = q;
        sl[ns++] = (size_t)(e - q);
        q = e + 1;
    }
    luaL_argcheck(L, nids * ns <= PIPELINE_ARGS, 2, "eval_ids: too many keys");
    for (i = 0; i < nids; i++) {
        size_t idl;
        lua_rawgeti(L, entry, first_id + i);
        luaL_argcheck(L, lua_type(L, -1) == LUA_TSTRING, 2, "eval_ids: ids must be strings");
        lua_tolstring(L, -1, &idl);
        lua_pop(L, 1);
        for (j = 0; j < ns; j++) bytes += mql_eo_key_len(plen, NULL, 0, sl[j]) + 2 * idl + 1;
    }
    if (!buf) {
        lua_pop(L, 2);
        return nids * ns;
    }
    p = *buf = mql_xmalloc(bytes + 1);
    for (i = 0; i < nids; i++) {
        size_t idl;
        const char *id;
        lua_rawgeti(L, entry, first_id + i);
        id = lua_tolstring(L, -1, &idl);
        lua_pop(L, 1);   /* the list keeps the string alive */
        for (j = 0; j < ns; j++) {
            argv[n] = p;
            lens[n] = mql_eo_key(p, prefix, plen, id, idl, sp[j], sl[j]);
            p += lens[n++];
        }
    }
    lua_pop(L, 2);
    return n;
}

/* Checks entry i of a pipeline list (at index t) and collects its strings:
 * {"command", arg, ...}, {"eval", script, numkeys, key..., arg...}, or
 * {"eval_ids", script, prefix, suffixes, n, id1..idn, arg...}: an eval whose
 * keys the core writes, each id's key with each suffix (space apart) in the
 * exactly-once policy's layout (mql_redis_keys.h), so a batch of the policy
 * costs Lua no key strings. Raises on a bad entry, before any command was
 * built. keybuf: NULL to check only; else an eval_ids entry's keys are written
 * into *keybuf (the caller frees it). Returns the argument count (after the
 * kind, and for the evals after the script and numkeys). */
static int pipeline_entry(lua_State *L, int t, int i, const char **argv, size_t *lens,
                          const char **script, int *numkeys, char **keybuf) {
    int n = 0, j, base;
    const char *kind;
    lua_rawgeti(L, t, i);
    luaL_argcheck(L, lua_istable(L, -1), 2, "a list of command tables expected");
    lua_rawgeti(L, -1, 1);
    kind = lua_tostring(L, -1);
    lua_pop(L, 1);
    luaL_argcheck(L, kind && (!strcmp(kind, "command") || !strcmp(kind, "eval") ||
                              !strcmp(kind, "eval_ids")), 2,
                  "each entry starts with \"command\", \"eval\" or \"eval_ids\"");
    *script = NULL;
    *numkeys = 0;
    base = 2;
    if (kind[0] == 'e') {
        lua_rawgeti(L, -1, 2);
        *script = lua_tostring(L, -1);
        lua_pop(L, 1);
        luaL_argcheck(L, *script != NULL, 2, "an eval entry needs a script");
        if (kind[4] == '_') {
            int nids;
            lua_rawgeti(L, -1, 5);
            nids = (int)lua_tointeger(L, -1);
            lua_pop(L, 1);
            luaL_argcheck(L, nids > 0 && nids <= PIPELINE_ARGS, 2, "eval_ids: a count of ids expected");
            n = *numkeys = ids_keys(L, lua_gettop(L), 6, nids, argv, lens, keybuf);
            base = 6 + nids;
        } else {
            lua_rawgeti(L, -1, 3);
            *numkeys = (int)lua_tointeger(L, -1);
            lua_pop(L, 1);
            base = 4;
        }
    }
    for (j = base;; j++) {
        lua_rawgeti(L, -1, j);
        if (lua_isnil(L, -1)) {
            lua_pop(L, 1);
            break;
        }
        if (n == PIPELINE_ARGS) luaL_error(L, "mqlease: at most %d redis arguments", PIPELINE_ARGS);
        luaL_argcheck(L, lua_type(L, -1) == LUA_TSTRING, 2, "command arguments must be strings");
        argv[n] = lua_tolstring(L, -1, &lens[n]);
        lua_pop(L, 1);   /* the list keeps the string alive */
        n++;
    }
    lua_pop(L, 1);
    luaL_argcheck(L, *script ? (*numkeys >= 0 && *numkeys <= n) : n > 0, 2,
                  "an empty command or numkeys out of range");
    return n;
}

/* r:pipeline(list) -> first op id: queues every command of list together
 * (mql_redis_submit); entry i's op id is first + i - 1. */
static int l_redis_pipeline(lua_State *L) {
    mql_redis *r = check_redis(L);
    const char *argv[PIPELINE_ARGS], *script;
    size_t lens[PIPELINE_ARGS];
    mql_redis_cmd **cmds;
    int n, i, numkeys;
    luaL_checktype(L, 2, LUA_TTABLE);
    n = (int)lua_rawlen(L, 2);
    luaL_argcheck(L, n > 0, 2, "an empty pipeline");
    for (i = 1; i <= n; i++) pipeline_entry(L, 2, i, argv, lens, &script, &numkeys, NULL);
    /* every entry checked: nothing below raises, so nothing built can leak */
    cmds = mql_xcalloc((size_t)n, sizeof(*cmds));
    for (i = 1; i <= n; i++) {
        char *keys = NULL;
        int argc = pipeline_entry(L, 2, i, argv, lens, &script, &numkeys, &keys);
        cmds[i - 1] = script ? mql_redis_cmd_eval(r, script, numkeys, argc, argv, lens)
                             : mql_redis_cmd_new(argc, argv, lens);
        free(keys);
    }
    lua_pushinteger(L, (lua_Integer)mql_redis_submit(r, cmds, n));
    free(cmds);
    return 1;
}

/* r:stats() -> round trips, commands (the command connection's) */
static int l_redis_stats(lua_State *L) {
    uint64_t trips, commands;
    mql_redis_stats(check_redis(L), &trips, &commands);
    lua_pushinteger(L, (lua_Integer)trips);
    lua_pushinteger(L, (lua_Integer)commands);
    return 2;
}

/* The longest ttl, every or max in ms (1e12 s, as mqlease.redis checks): the
 * keepalive adds them to the clock in 64 bits. A ttl of 0 ms would go as
 * PEXPIRE 0, which deletes the lock. */
#define KEEPALIVE_MS_MAX ((lua_Integer)1000000000000000)

/* The times of a keepalive from argument first on (ttl, every, max, since). */
static void keepalive_times(lua_State *L, int first, lua_Integer t[4]) {
    t[0] = luaL_checkinteger(L, first);
    t[1] = luaL_checkinteger(L, first + 1);
    t[2] = luaL_optinteger(L, first + 2, 0);
    t[3] = luaL_optinteger(L, first + 3, 0);
    luaL_argcheck(L, t[0] >= 1 && t[0] <= KEEPALIVE_MS_MAX, first, "ttl_ms out of range");
    luaL_argcheck(L, t[1] >= 0 && t[1] <= KEEPALIVE_MS_MAX, first + 1, "every_ms out of range");
    luaL_argcheck(L, t[2] >= 0 && t[2] <= KEEPALIVE_MS_MAX, first + 2, "max_ms out of range");
    luaL_argcheck(L, t[3] >= 0, first + 3, "since_ms out of range");
}

/* r:keepalive(key, owner, ttl_ms, every_ms [, max_ms [, since_ms]]) -> id; since_ms is
 * core.now() * 1000 taken before the acquire was sent (see mql_redis_keepalive). */
static int l_redis_keepalive(lua_State *L) {
    mql_redis *r = check_redis(L);
    size_t key_len, owner_len;
    const char *key = luaL_checklstring(L, 2, &key_len), *owner = luaL_checklstring(L, 3, &owner_len);
    lua_Integer t[4];
    lua_Integer ttl, every, max, since;
    keepalive_times(L, 4, t);
    ttl = t[0], every = t[1], max = t[2], since = t[3];
    lua_pushinteger(L, (lua_Integer)mql_redis_keepalive(r, key, key_len, owner, owner_len, ttl, every,
                                                        max, since));
    return 1;
}

/* r:keepalive_of(prefix, id, suffix, owner, ttl_ms, every_ms, max_ms, since_ms) -> id:
 * keepalive() of id's key in the exactly-once policy's layout (mql_redis_keys.h),
 * written here, so the policy keeps no key string of its own per message. */
static int l_redis_keepalive_of(lua_State *L) {
    mql_redis *r = check_redis(L);
    size_t plen, idl, sl, owner_len, len;
    const char *prefix = luaL_checklstring(L, 2, &plen), *id = luaL_checklstring(L, 3, &idl);
    const char *suffix = luaL_checklstring(L, 4, &sl), *owner = luaL_checklstring(L, 5, &owner_len);
    lua_Integer t[4];
    char stack[256], *key = stack;
    lua_Integer ttl, every, max, since;
    keepalive_times(L, 6, t);
    ttl = t[0], every = t[1], max = t[2], since = t[3];
    if (mql_eo_key_len(plen, id, idl, sl) > sizeof(stack)) key = mql_xmalloc(mql_eo_key_len(plen, id, idl, sl));
    len = mql_eo_key(key, prefix, plen, id, idl, suffix, sl);
    lua_pushinteger(L, (lua_Integer)mql_redis_keepalive(r, key, len, owner, owner_len, ttl, every, max, since));
    if (key != stack) free(key);
    return 1;
}

/* core.eo_key(prefix, id, suffix) -> the key the core writes for id (the
 * policy's layout; a spec holds it equal to mqlease.policy.key_base's). */
int lmql_eo_key(lua_State *L) {
    size_t plen, idl, sl;
    const char *prefix = luaL_checklstring(L, 1, &plen), *id = luaL_checklstring(L, 2, &idl);
    const char *suffix = luaL_checklstring(L, 3, &sl);
    size_t need = mql_eo_key_len(plen, id, idl, sl);
    char stack[256];
    /* a long key is written into a userdata: the collector owns it if the push raises */
    char *key = need <= sizeof(stack) ? stack : lua_newuserdata(L, need);
    lua_pushlstring(L, key, mql_eo_key(key, prefix, plen, id, idl, suffix, sl));
    return 1;
}

static int l_redis_keepalive_stop(lua_State *L) {
    lua_pushboolean(L, mql_redis_keepalive_stop(check_redis(L), (uint64_t)luaL_checkinteger(L, 2)));
    return 1;
}

static int l_redis_keepalive_lost(lua_State *L) {
    lua_pushboolean(L, mql_redis_keepalive_lost(check_redis(L), (uint64_t)luaL_checkinteger(L, 2)));
    return 1;
}

static int l_redis_fd(lua_State *L) {
    lua_pushinteger(L, mql_redis_fd(check_redis(L)));
    return 1;
}

static int l_redis_events(lua_State *L) {
    mql_redis *r = check_redis(L);
    static const lmql_event_hooks hooks = {requeue_redis_events, NULL};
    lmql_push_events(L, mql_redis_take_events(r), &hooks, luaL_checkudata(L, 1, REDIS_MT));
    return 1;
}

static int l_redis_close(lua_State *L) {
    lredis *lr = luaL_checkudata(L, 1, REDIS_MT);
    if (lr->r) {
        mql_redis_free(lr->r);
        lr->r = NULL;
    }
    return 0;
}

static int l_redis_closed(lua_State *L) {
    lredis *lr = luaL_checkudata(L, 1, REDIS_MT);
    lua_pushboolean(L, lr->r == NULL);
    return 1;
}

static const luaL_Reg redis_methods[] = {
    {"command", l_redis_command}, {"eval", l_redis_eval}, {"pipeline", l_redis_pipeline},
    {"stats", l_redis_stats}, {"keepalive", l_redis_keepalive}, {"keepalive_of", l_redis_keepalive_of},
    {"keepalive_stop", l_redis_keepalive_stop}, {"keepalive_lost", l_redis_keepalive_lost}, {"fd", l_redis_fd}, {"events", l_redis_events},
    {"close", l_redis_close}, {"closed", l_redis_closed}, {NULL, NULL}};


void lmql_open_redis(lua_State *L) {
    if (luaL_newmetatable(L, REDIS_MT)) {
        lua_newtable(L);
        luaL_setfuncs(L, redis_methods, 0);
        lua_setfield(L, -2, "__index");
        lua_pushcfunction(L, l_redis_close);
        lua_setfield(L, -2, "__gc");
        lua_pushcfunction(L, l_redis_close);
        lua_setfield(L, -2, "__close");
    }
    lua_pop(L, 1);
}
