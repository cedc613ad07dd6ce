/* lmql_message.c -- a received message as Lua holds it: one full userdata.
 *
 * A consumer holds its messages by the million, so a message is a single
 * allocation of the Lua heap: its fixed fields (the core's lease id, queue
 * offset, born and store times) and its text (the message id, then the body)
 * in the userdata's own bytes. A table with the same fields costs a Table
 * header (56 bytes), an array of slots (16 each), an interned id string and a
 * body string (24 bytes of header each, every one rounded up to the
 * allocator's 16-byte chunks; Lua 5.4's lobject.h: Table, TValue, TString);
 * the userdata has one header (Udata, 56 bytes with its user value) and one
 * chunk. A message id of uppercase hex digits, as RocketMQ's MessageIdCodec
 * makes them ("01" and 32 digits), is kept as the bytes the digits spell,
 * half its length.
 *
 * m.id and m.body make their strings when read (an id is a short string,
 * interned: the same string each time; a body is copied each time: read it
 * into a local). A body longer than MESSAGE_INLINE_BODY is a Lua string from
 * the start instead, kept in the message's table (below) under a key of its
 * own: no copy per read where a copy would cost, and its table's bytes are
 * small beside such a body. What few messages have (keys, properties, message_group,
 * trace_context, delivery_timestamp, priority, lite_topic), the lease object once made
 * and whatever a user sets on a message live in a table of its own, the
 * userdata's user value (its environment on LuaJIT), made only for a message
 * that needs one. A field set there hides the message's own of that name.
 *
 * The fields a consumer's messages share (topic, tag, hosts, ...) come from
 * the shape the __index made by lmql_message_index keeps as an upvalue
 * (lua/mqlease/message.lua makes one metatable per shape).
 */
#include "lmqlease.h"

#include <stdint.h>
#include <string.h>

#define MESSAGE_NO_ID UINT16_MAX
/* The core hands over no id longer than MQL_MESSAGE_ID_MAX (mql_inbound.c
 * refuses the frame), so every received message's id fits id_len: one that
 * did not would raise in lmql_push_events and cost its whole receive. */
_Static_assert(MQL_MESSAGE_ID_MAX < MESSAGE_NO_ID, "a message id's length must fit id_len");
#define MESSAGE_INLINE_BODY 1024   /* bytes: a longer body is a Lua string (see above) */

/* the key of a long body in the message's table (a light userdata: no name a
 * user may set, and pairs skips it) */
static const char message_body_key = 0;

typedef struct lmql_message {
    lua_Integer lease_id;   /* the core's lease id */
    int64_t offset;         /* queue offset */
    int64_t born_ms;        /* epoch ms */
    int64_t store_ms;       /* epoch ms, 0 when the broker gave none */
    uint32_t body_len;
    uint16_t id_len;        /* characters of the id, MESSAGE_NO_ID without one */
    uint8_t id_packed;      /* 1: the id is in text as id_len / 2 bytes (hex digits) */
    uint8_t body_out;       /* 1: the body is a string in the message's table, not in text */
    char text[];            /* the id (raw, or packed), then the body */
} lmql_message;

#if LUA_VERSION_NUM >= 504
#define message_newud(L, size) lua_newuserdatauv(L, size, 1)
#else
/* LuaJIT / 5.1: no user values; the environment is the companion table, and
 * one shared empty table in the registry stands for "none" */
static const char message_no_extras = 0;
static void *message_newud(lua_State *L, size_t size) {
    void *p = lua_newuserdata(L, size);
    lua_pushlightuserdata(L, (void *)&message_no_extras);
    lua_rawget(L, LUA_REGISTRYINDEX);
    if (!lua_istable(L, -1)) {
        lua_pop(L, 1);
        lua_newtable(L);
        lua_pushlightuserdata(L, (void *)&message_no_extras);
        lua_pushvalue(L, -2);
        lua_rawset(L, LUA_REGISTRYINDEX);
    }
    lua_setfenv(L, -2);
    return p;
}
#endif

/* Pushes the companion table of the message at idx, or nil; returns 1 if it
 * is a table. */
static int message_get_extras(lua_State *L, int idx) {
#if LUA_VERSION_NUM >= 504
    return lua_getiuservalue(L, idx, 1) == LUA_TTABLE;
#else
    lua_getfenv(L, idx);
    lua_pushlightuserdata(L, (void *)&message_no_extras);
    lua_rawget(L, LUA_REGISTRYINDEX);
    if (lua_rawequal(L, -1, -2)) {
        lua_pop(L, 2);
        lua_pushnil(L);
        return 0;
    }
    lua_pop(L, 1);
    return lua_istable(L, -1);
#endif
}

/* Pushes the companion table of the message at idx, making it if need be. */
static void message_extras(lua_State *L, int idx) {
    idx = idx < 0 ? lua_gettop(L) + idx + 1 : idx;
    if (message_get_extras(L, idx)) return;
    lua_pop(L, 1);
    lua_newtable(L);
    lua_pushvalue(L, -1);
#if LUA_VERSION_NUM >= 504
    lua_setiuservalue(L, idx, 1);
#else
    lua_setfenv(L, idx);
#endif
}

static int message_hex(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* An id that packs: an even number of uppercase hex digits. */
static int message_id_packs(const char *id, size_t len) {
    size_t i;
    if (len == 0 || len % 2) return 0;
    for (i = 0; i < len; i++)
        if (message_hex(id[i]) < 0) return 0;
    return 1;
}

static size_t message_id_bytes(const lmql_message *m) {
    if (m->id_len == MESSAGE_NO_ID) return 0;
    return m->id_packed ? (size_t)m->id_len / 2 : m->id_len;
}

/* Pushes a new message userdata (no metatable yet: message_bind gives it its
 * shape's) with these fields; returns it for the caller's extras. */
static lmql_message *message_new(lua_State *L, lua_Integer lease_id, int64_t offset,
                                 int64_t born_ms, int64_t store_ms, const char *id,
                                 const char *body, size_t body_len) {
    size_t id_len = id ? strlen(id) : 0, i;
    int packed = id && message_id_packs(id, id_len), out = body_len > MESSAGE_INLINE_BODY;
    size_t id_bytes;
    lmql_message *m;
    if (id && id_len >= MESSAGE_NO_ID) luaL_error(L, "mqlease: a message id of %d characters", (int)id_len);
    if (body_len > UINT32_MAX) luaL_error(L, "mqlease: a message body of %d bytes or more", (int)UINT32_MAX);
    id_bytes = !id ? 0 : packed ? id_len / 2 : id_len;
    m = message_newud(L, offsetof(lmql_message, text) + id_bytes + (out ? 0 : body_len));
    m->lease_id = lease_id;
    m->offset = offset;
    m->born_ms = born_ms;
    m->store_ms = store_ms;
    m->body_len = out ? 0 : (uint32_t)body_len;
    m->body_out = (uint8_t)out;
    m->id_len = id ? (uint16_t)id_len : MESSAGE_NO_ID;
    m->id_packed = (uint8_t)packed;
    if (packed) {
        for (i = 0; i < id_len / 2; i++)
            m->text[i] = (char)(message_hex(id[2 * i]) << 4 | message_hex(id[2 * i + 1]));
    } else if (id) {
        memcpy(m->text, id, id_len);
    }
    if (out) {
        message_extras(L, -1);
        lua_pushlightuserdata(L, (void *)&message_body_key);
        lua_pushlstring(L, body, body_len);
        lua_rawset(L, -3);
        lua_pop(L, 1);
    } else if (body_len) {
        memcpy(m->text + id_bytes, body, body_len);
    }
    return m;
}

static void message_push_id(lua_State *L, const lmql_message *m) {
    static const char digits[] = "0123456789ABCDEF";
    char buf[256];
    size_t i, n;
    if (m->id_len == MESSAGE_NO_ID) {
        lua_pushnil(L);
        return;
    }
    if (!m->id_packed) {
        lua_pushlstring(L, m->text, m->id_len);
        return;
    }
    n = m->id_len / 2;
    if (m->id_len > sizeof(buf)) {
        luaL_Buffer b;
        luaL_buffinit(L, &b);
        for (i = 0; i < n; i++) {
            luaL_addchar(&b, digits[(unsigned char)m->text[i] >> 4]);
            luaL_addchar(&b, digits[(unsigned char)m->text[i] & 15]);
        }
        luaL_pushresult(&b);
        return;
    }
    for (i = 0; i < n; i++) {
        buf[2 * i] = digits[(unsigned char)m->text[i] >> 4];
        buf[2 * i + 1] = digits[(unsigned char)m->text[i] & 15];
    }
    lua_pushlstring(L, buf, m->id_len);
}

/* Pushes the own field k (a name of length n) of the message m at idx; 0 if k
 * is none of them. */
static int message_push_own(lua_State *L, int idx, const lmql_message *m, const char *k, size_t n) {
    switch (n) {
    case 2:
        if (memcmp(k, "id", 2) == 0) { message_push_id(L, m); return 1; }
        break;
    case 4:
        if (memcmp(k, "body", 4) == 0) {
            if (!m->body_out) {
                lua_pushlstring(L, m->text + message_id_bytes(m), m->body_len);
            } else if (message_get_extras(L, idx)) {
                lua_pushlightuserdata(L, (void *)&message_body_key);
                lua_rawget(L, -2);
                lua_remove(L, -2);
            }
            return 1;
        }
        break;
    case 6:
        if (memcmp(k, "offset", 6) == 0) { lua_pushinteger(L, (lua_Integer)m->offset); return 1; }
        break;
    case 7:
        if (memcmp(k, "born_at", 7) == 0) { lua_pushnumber(L, (lua_Number)m->born_ms / 1000.0); return 1; }
        break;
    case 8:
        if (memcmp(k, "store_at", 8) == 0) {
            if (m->store_ms) lua_pushnumber(L, (lua_Number)m->store_ms / 1000.0);
            else lua_pushnil(L);
            return 1;
        }
        break;
    }
    return 0;
}

static int message_has_rare_fields(const mql_message *m) {
    return m->delivery_ms || m->trace_context || m->message_group || m->has_priority
        || m->lite_topic || m->nkeys > 0 || m->nprops > 0;
}

void lmql_message_push(lua_State *L, const mql_message *m) {
    message_new(L, (lua_Integer)m->lease_id, (int64_t)m->queue_offset, (int64_t)m->born_ms,
                (int64_t)m->store_ms, m->id, (const char *)m->body, m->body_len);
    if (!message_has_rare_fields(m)) return;
    message_extras(L, -1);
    lmql_set_rare_fields(L, m);
    lua_pop(L, 1);
}

/* The message at idx, or NULL when it is something else: a message's
 * metatable names "mqlease.message" (unbound: it has none yet, as the core's
 * event hands it over before message_bind). */
static lmql_message *message_test(lua_State *L, int idx, int unbound) {
    int ok;
    if (lua_type(L, idx) != LUA_TUSERDATA || lua_rawlen(L, idx) < offsetof(lmql_message, text))
        return NULL;
    if (!lua_getmetatable(L, idx)) return unbound ? lua_touserdata(L, idx) : NULL;
    lua_getfield(L, -1, "__name");
    ok = lua_type(L, -1) == LUA_TSTRING && strcmp(lua_tostring(L, -1), "mqlease.message") == 0;
    lua_pop(L, 2);
    return ok ? lua_touserdata(L, idx) : NULL;
}

static lmql_message *message_check(lua_State *L, int idx, int unbound) {
    lmql_message *m = message_test(L, idx, unbound);
    if (!m) luaL_argerror(L, idx, "a message of mqlease expected");
    return m;
}

/* The userdata at idx if it is exactly as long as a message with its
 * header's lengths, else raises. __index is reachable as a plain function
 * (getmetatable(m).__index) and reads a message's bytes: this keeps those
 * reads inside the block, for what runs on every field read, at the cost of
 * a length and not of message_check's metatable lookup. */
static lmql_message *message_sized(lua_State *L, int idx) {
    lmql_message *m = lua_touserdata(L, idx);
    size_t len = lua_type(L, idx) == LUA_TUSERDATA ? lua_rawlen(L, idx) : 0;
    if (len < offsetof(lmql_message, text)
        || len != offsetof(lmql_message, text) + message_id_bytes(m) + (m->body_out ? 0 : m->body_len))
        luaL_argerror(L, idx, "a message of mqlease expected");
    return m;
}

/* __index of the messages of one shape (upvalues: the shape, lease_of):
 * the companion table's field, else the message's own, else for "lease"
 * lease_of(m), else the shape's (and through it the methods). */
static int message_index(lua_State *L) {
    lmql_message *m = message_sized(L, 1);
    size_t n = 0;
    const char *k = lua_type(L, 2) == LUA_TSTRING ? lua_tolstring(L, 2, &n) : NULL;
    if (message_get_extras(L, 1)) {
        lua_pushvalue(L, 2);
        lua_rawget(L, -2);
        if (!lua_isnil(L, -1)) return 1;
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
    if (k && message_push_own(L, 1, m, k, n)) return 1;
    if (k && n == 5 && memcmp(k, "lease", 5) == 0) {
        lua_pushvalue(L, lua_upvalueindex(2));
        lua_pushvalue(L, 1);
        lua_call(L, 1, 1);
        return 1;
    }
    lua_pushvalue(L, 2);
    lua_gettable(L, lua_upvalueindex(1));
    return 1;
}

/* core.message_index(shape, lease_of) -> the __index of a shape's messages. */
static int l_message_index(lua_State *L) {
    luaL_checktype(L, 1, LUA_TTABLE);
    luaL_checktype(L, 2, LUA_TFUNCTION);
    lua_settop(L, 2);
    lua_pushcclosure(L, message_index, 2);
    return 1;
}

/* __newindex: into the companion table (made on the first field set). */
static int message_newindex(lua_State *L) {
    message_check(L, 1, 0);   /* a user value set on anything else writes into its bytes */
    message_extras(L, 1);
    lua_pushvalue(L, 2);
    lua_pushvalue(L, 3);
    lua_rawset(L, -3);
    return 0;
}

/* core.message_bind(m, mt) -> m, with its shape's metatable. */
static int l_message_bind(lua_State *L) {
    message_check(L, 1, 1);
    luaL_checktype(L, 2, LUA_TTABLE);
    lua_settop(L, 2);
    lua_setmetatable(L, 1);
    return 1;
}

/* core.message_extras(m [, make]) -> its companion table, or nil (made when make). */
static int l_message_extras(lua_State *L) {
    message_check(L, 1, 0);
    if (lua_toboolean(L, 2)) message_extras(L, 1);
    else message_get_extras(L, 1);
    return 1;
}

/* core.message_lease_id(x) -> the core's lease id of message x, or nil when x
 * is not a message of mqlease. */
static int l_message_lease_id(lua_State *L) {
    lmql_message *m = message_test(L, 1, 0);
    if (!m) return 0;
    lua_pushinteger(L, m->lease_id);
    return 1;
}

/* core.message_own(m, k) -> the message's own field k (id, body, offset,
 * born_at, store_at), or nil: what its companion table may hide. */
static int l_message_own(lua_State *L) {
    lmql_message *m = message_check(L, 1, 0);
    size_t n;
    const char *k = luaL_checklstring(L, 2, &n);
    if (!message_push_own(L, 1, m, k, n)) lua_pushnil(L);
    return 1;
}

/* A time in seconds as the whole milliseconds the message keeps. One no
 * int64 of milliseconds holds (inf, NaN, 1e300) raises, naming the field:
 * converting it would be undefined in C (a float-to-integer overflow). */
#define MESSAGE_MOST_SECONDS 9.0e15
static int64_t message_ms(lua_State *L, int t, const char *key) {
    lua_Number v;
    lua_getfield(L, t, key);
    v = lua_isnil(L, -1) ? 0 : luaL_checknumber(L, -1);
    lua_pop(L, 1);
    if (!(v >= -MESSAGE_MOST_SECONDS && v <= MESSAGE_MOST_SECONDS))
        luaL_error(L, "mqlease.message: '%s' must be a finite number of seconds (got %f)", key, (double)v);
    return (int64_t)(v * 1000.0 + (v < 0 ? -0.5 : 0.5));
}

/* core.message_new(fields) -> a message as the core hands one over, from a
 * table of its fields (id, body, offset, born_at, store_at, lease: the core's
 * lease id; any other field goes into its companion table). For fakes and
 * specs that have no broker. */
static int l_message_new(lua_State *L) {
    size_t body_len = 0;
    const char *id, *body;
    lua_Integer lease_id, offset;
    int t = 1;
    luaL_checktype(L, t, LUA_TTABLE);
    lua_getfield(L, t, "id");
    id = lua_isnil(L, -1) ? NULL : luaL_checkstring(L, -1);
    lua_getfield(L, t, "body");
    body = lua_isnil(L, -1) ? "" : luaL_checklstring(L, -1, &body_len);
    lua_getfield(L, t, "lease");
    lease_id = luaL_checkinteger(L, -1);
    lua_getfield(L, t, "offset");
    offset = lua_isnil(L, -1) ? 0 : luaL_checkinteger(L, -1);
    lua_pop(L, 2);
    message_new(L, lease_id, (int64_t)offset, message_ms(L, t, "born_at"), message_ms(L, t, "store_at"),
                id, body, body_len);
    lua_pushnil(L);
    while (lua_next(L, t)) {
        size_t n = 0;
        const char *k = lua_type(L, -2) == LUA_TSTRING ? lua_tolstring(L, -2, &n) : NULL;
        int own = k && ((n == 2 && !memcmp(k, "id", 2)) || (n == 4 && !memcmp(k, "body", 4))
                        || (n == 5 && !memcmp(k, "lease", 5)) || (n == 6 && !memcmp(k, "offset", 6))
                        || (n == 7 && !memcmp(k, "born_at", 7)) || (n == 8 && !memcmp(k, "store_at", 8)));
        if (!own) {
            message_extras(L, -3);
            lua_pushvalue(L, -3);
            lua_pushvalue(L, -3);
            lua_rawset(L, -3);
            lua_pop(L, 1);
        }
        lua_pop(L, 1);
    }
    lua_remove(L, -2);   /* the id string */
    lua_remove(L, -2);   /* the body string */
    return 1;
}

static const luaL_Reg message_functions[] = {
    {"message_index", l_message_index}, {"message_bind", l_message_bind},
    {"message_extras", l_message_extras}, {"message_lease_id", l_message_lease_id},
    {"message_own", l_message_own}, {"message_new", l_message_new}, {NULL, NULL}};

void lmql_open_message(lua_State *L) {
    luaL_setfuncs(L, message_functions, 0);
    lua_pushcfunction(L, message_newindex);
    lua_setfield(L, -2, "message_newindex");
}
