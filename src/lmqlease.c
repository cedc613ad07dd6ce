/* lmqlease.c -- mqlease.core: the Lua binding of the C core.
 *
 * The only file that includes lua.h. Every function here is non-blocking
 * except core.wait and core.sleep: operations return an op id at once and
 * their results come back from client:events() once client:fd() is readable.
 * the Lua modules in lua/mqlease/ turn that into calls that wait (and yield inside
 * coroutines). Arguments are validated by lua/mqlease/config.lua before they
 * get here; what is checked here raises, as a programmer error would.
 */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <signal.h>

#include "mql_client.h"
#include "mql_compat.h"
#include "mql_redis.h"
#include "mql_shutdown.h"

#define CLIENT_MT "mqlease.core.client"
#define WATCHER_MT "mqlease.core.signals"
#define REDIS_MT "mqlease.core.redis"

/* The value of a Redis nil reply (a light userdata, unique and comparable). */
static const char null_sentinel = 0;
#define PUSH_NULL(L) lua_pushlightuserdata(L, (void *)&null_sentinel)

typedef struct lclient {
    mql_client *c;
} lclient;

static mql_client *check_client(lua_State *L) {
    lclient *lc = luaL_checkudata(L, 1, CLIENT_MT);
    if (!lc->c) luaL_error(L, "mqlease: the client is closed");
    return lc->c;
}

/* ------------------------------------------------------------ config */

static const char *opt_string(lua_State *L, int t, const char *key) {
    const char *s;
    lua_getfield(L, t, key);
    s = lua_isnil(L, -1) ? NULL : luaL_checkstring(L, -1);
    lua_pop(L, 1);   /* the config table keeps the string alive */
    return s;
}

static lua_Integer opt_int(lua_State *L, int t, const char *key, lua_Integer def) {
    lua_Integer v;
    lua_getfield(L, t, key);
    v = lua_isnil(L, -1) ? def : (lua_Integer)luaL_checknumber(L, -1);
    lua_pop(L, 1);
    return v;
}

static int opt_bool(lua_State *L, int t, const char *key, int def) {
    int v;
    lua_getfield(L, t, key);
    v = lua_isnil(L, -1) ? def : lua_toboolean(L, -1);
    lua_pop(L, 1);
    return v;
}

static int new_client(lua_State *L, mql_client_type type) {
    mql_config cfg;
    const char *topics[64];
    char err[256];
    uint64_t start_op = 0;
    lclient *lc;
    size_t i, n;
    const char *budget;

    luaL_checktype(L, 1, LUA_TTABLE);
    memset(&cfg, 0, sizeof(cfg));
    cfg.type = type;
    cfg.endpoint = opt_string(L, 1, "endpoint");
    if (!cfg.endpoint) return luaL_error(L, "mqlease.core: endpoint is required");
    cfg.namespace_ = opt_string(L, 1, "namespace");
    cfg.access_key = opt_string(L, 1, "access_key");
    cfg.secret_key = opt_string(L, 1, "secret_key");
    cfg.security_token = opt_string(L, 1, "security_token");
    cfg.tls = opt_bool(L, 1, "tls", 0);
    cfg.tls_insecure = opt_bool(L, 1, "tls_insecure", 0);
    cfg.tls_ca_pem = opt_string(L, 1, "tls_ca_pem");
    cfg.tls_cert_pem = opt_string(L, 1, "tls_cert_pem");
    cfg.tls_key_pem = opt_string(L, 1, "tls_key_pem");
    cfg.tls_server_name = opt_string(L, 1, "tls_server_name");
    cfg.request_timeout_ms = opt_int(L, 1, "request_timeout_ms", 3000);
    cfg.group = opt_string(L, 1, "group");
    cfg.topic = opt_string(L, 1, "topic");
    cfg.filter = opt_string(L, 1, "filter");
    cfg.filter_sql = opt_bool(L, 1, "filter_sql", 0);
    cfg.invisible_ms = opt_int(L, 1, "invisible_ms", 30000);
    cfg.renew = opt_bool(L, 1, "renew", 1);
    cfg.renew_every_ms = opt_int(L, 1, "renew_every_ms", 0);
    cfg.max_renewals = (int)opt_int(L, 1, "max_renewals", -1);
    cfg.max_lease_ms = opt_int(L, 1, "max_lease_ms", 3600000);
    budget = opt_string(L, 1, "on_budget");
    cfg.on_budget = budget && strcmp(budget, "nack") == 0 ? MQL_BUDGET_NACK : MQL_BUDGET_EXPIRE;
    cfg.budget_nack_delay_ms = opt_int(L, 1, "budget_nack_delay_ms", 0);
    budget = opt_string(L, 1, "on_corrupt");
    cfg.on_corrupt_dlq = !(budget && strcmp(budget, "nack") == 0);
    cfg.corrupt_nack_delay_ms = opt_int(L, 1, "corrupt_nack_delay_ms", 0);
    cfg.max_body = opt_int(L, 1, "max_body", 0);
    lua_getfield(L, 1, "topics");
    if (lua_istable(L, -1)) {
        n = lua_rawlen(L, -1);
        if (n > 64) return luaL_error(L, "mqlease.core: at most 64 topics");
        for (i = 0; i < n; i++) {
            lua_rawgeti(L, -1, (int)i + 1);
            topics[i] = luaL_checkstring(L, -1);
            lua_pop(L, 1);
        }
        cfg.topics = topics;
        cfg.ntopics = n;
    }
    lua_pop(L, 1);
    if (type == MQL_CONSUMER && (!cfg.group || !cfg.topic))
        return luaL_error(L, "mqlease.core: a consumer needs group and topic");

    lc = lua_newuserdata(L, sizeof(*lc));
    lc->c = NULL;
    luaL_getmetatable(L, CLIENT_MT);
    lua_setmetatable(L, -2);
    lc->c = mql_client_new(&cfg, &start_op, err, sizeof(err));
    if (!lc->c) return luaL_error(L, "mqlease.core: %s", err);
    lua_pushinteger(L, (lua_Integer)start_op);
    return 2;
}

static int l_consumer(lua_State *L) {
    return new_client(L, MQL_CONSUMER);
}

static int l_producer(lua_State *L) {
    return new_client(L, MQL_PRODUCER);
}

/* ------------------------------------------------------------ events */

static void set_str(lua_State *L, const char *key, const char *v) {
    if (!v) return;
    lua_pushstring(L, v);
    lua_setfield(L, -2, key);
}

static void set_int(lua_State *L, const char *key, lua_Integer v) {
    lua_pushinteger(L, v);
    lua_setfield(L, -2, key);
}

static void set_num(lua_State *L, const char *key, lua_Number v) {
    lua_pushnumber(L, v);
    lua_setfield(L, -2, key);
}

static void push_result_fields(lua_State *L, const mql_result *r) {
    lua_pushboolean(L, r->ok);
    lua_setfield(L, -2, "ok");
    if (!r->ok) {
        set_str(L, "err", r->msg);
        set_str(L, "code", r->code);
    }
}

static const char *message_type_name(int t) {
    switch (t) {
    case 1: return "NORMAL";
    case 2: return "FIFO";
    case 3: return "DELAY";
    case 4: return "TRANSACTION";
    default: return NULL;
    }
}

/* Field names follow the Java client's MessageView getters in snake_case;
 * times are epoch seconds (like os.time(), with milliseconds as fractions). */
static void push_message(lua_State *L, const mql_message *m) {
    size_t i;
    /* 16 slots: a typical message has 15 fields here and 16 once wrapped (Lua
     * rounds a size hint up to a power of two; a rarer, fuller one grows) */
    lua_createtable(L, 0, 16);
    set_str(L, "id", m->id);
    set_str(L, "topic", m->topic);
    set_str(L, "tag", m->tag);
    set_str(L, "message_group", m->message_group);
    set_str(L, "born_host", m->born_host);
    set_str(L, "store_host", m->store_host);
    set_str(L, "trace_context", m->trace_context);
    set_str(L, "message_type", message_type_name(m->message_type));
    lua_pushlstring(L, (const char *)m->body, m->body_len);
    lua_setfield(L, -2, "body");
    lua_createtable(L, (int)m->nkeys, 0);
    for (i = 0; i < m->nkeys; i++) {
        lua_pushstring(L, m->keys[i]);
        lua_rawseti(L, -2, (int)i + 1);
    }
    lua_setfield(L, -2, "keys");
    lua_createtable(L, 0, (int)m->nprops);
    for (i = 0; i < m->nprops; i++) {
        lua_pushlstring(L, m->props[i].value, m->props[i].value_len);
        lua_setfield(L, -2, m->props[i].key);
    }
    lua_setfield(L, -2, "properties");
    set_int(L, "delivery_attempt", m->delivery_attempt);
    set_int(L, "queue_id", m->queue_id);
    set_int(L, "offset", (lua_Integer)m->queue_offset);
    set_num(L, "born_at", (lua_Number)m->born_ms / 1000.0);
    if (m->store_ms) set_num(L, "store_at", (lua_Number)m->store_ms / 1000.0);
    if (m->delivery_ms) set_num(L, "delivery_timestamp", (lua_Number)m->delivery_ms / 1000.0);
    set_int(L, "lease_id", (lua_Integer)m->lease_id);
}

static void push_reply(lua_State *L, const mql_reply *r) {
    size_t i;
    /* nested arrays recurse: make room for each level (hiredis bounds the depth) */
    luaL_checkstack(L, 3, "mqlease: Redis reply nested too deeply");
    switch (r->type) {
    case MQL_REPLY_NIL: PUSH_NULL(L); break;
    case MQL_REPLY_INTEGER: lua_pushinteger(L, (lua_Integer)r->integer); break;
    case MQL_REPLY_STRING:
    case MQL_REPLY_STATUS:
    case MQL_REPLY_ERROR: lua_pushlstring(L, r->str ? r->str : "", r->len); break;
    case MQL_REPLY_ARRAY:
        lua_createtable(L, (int)r->nelements, 0);
        for (i = 0; i < r->nelements; i++) {
            push_reply(L, &r->elements[i]);
            lua_rawseti(L, -2, (int)i + 1);
        }
        break;
    }
}

static void push_event(lua_State *L, const mql_event *ev) {
    size_t i;
    lua_createtable(L, 0, 8);
    if (ev->kind == MQL_EV_LOCK_LOST) {
        set_str(L, "kind", "lock_lost");
        set_int(L, "keepalive", (lua_Integer)ev->keepalive_id);
        return;
    }
    if (ev->kind == MQL_EV_LEASE) {
        set_str(L, "kind", "lease");
        set_int(L, "lease_id", (lua_Integer)ev->lease_id);
        set_str(L, "state", mql_lease_state_name((mql_lease_state)ev->lease_state));
        set_int(L, "renewals", ev->lease_renewals);
        return;
    }
    set_str(L, "kind", "op");
    set_int(L, "op", (lua_Integer)ev->op);
    push_result_fields(L, &ev->result);
    if (ev->msgs || ev->nmsgs) {
        lua_createtable(L, (int)ev->nmsgs, 0);
        for (i = 0; i < ev->nmsgs; i++) {
            push_message(L, &ev->msgs[i]);
            lua_rawseti(L, -2, (int)i + 1);
        }
        lua_setfield(L, -2, "messages");
    }
    if (ev->message_id) {
        set_str(L, "message_id", ev->message_id);
        set_int(L, "offset", (lua_Integer)ev->offset);
    }
    if (ev->reply) {
        push_reply(L, ev->reply);
        lua_setfield(L, -2, "reply");
        if (ev->reply->type == MQL_REPLY_ERROR) set_str(L, "reply_error", ev->reply->str);
    }
    if (ev->entries) {
        lua_createtable(L, (int)ev->nentries, 0);
        for (i = 0; i < ev->nentries; i++) {
            lua_createtable(L, 0, 3);
            push_result_fields(L, &ev->entries[i]);
            lua_rawseti(L, -2, (int)i + 1);
        }
        lua_setfield(L, -2, "entries");
    }
}

static int push_event_list(lua_State *L) {
    const mql_event *ev = lua_touserdata(L, 1);
    int n = 0;
    lua_newtable(L);
    for (; ev; ev = ev->next) {
        push_event(L, ev);
        lua_rawseti(L, -2, ++n);
    }
    return 1;
}

/* Pushes an array of event tables (possibly empty) and frees the list. The
 * tables are built in a protected call: if Lua runs out of memory halfway,
 * the whole list goes back to its queue (requeue) -- no event, and so no
 * waiting coroutine's result, is lost -- and the error is raised again. */
static void push_events(lua_State *L, mql_event *list, void (*requeue)(void *, mql_event *),
                        void *owner) {
    mql_event *ev, *next;
    lua_pushcfunction(L, push_event_list);
    lua_pushlightuserdata(L, list);
    if (lua_pcall(L, 1, 1, 0) != 0) {
        if (requeue) requeue(owner, list);
        lua_error(L);
    }
    for (ev = list; ev; ev = next) {
        next = ev->next;
        mql_event_free(ev);
    }
}

static void requeue_client_events(void *c, mql_event *list) {
    mql_client_requeue_events(c, list);
}

static void requeue_redis_events(void *r, mql_event *list) {
    mql_redis_requeue_events(r, list);
}

/* client:events() -> array of event tables; drains the fd. */
static int l_events(lua_State *L) {
    mql_client *c = check_client(L);
    push_events(L, mql_client_take_events(c), requeue_client_events, c);
    return 1;
}

static int l_fd(lua_State *L) {
    lua_pushinteger(L, mql_client_fd(check_client(L)));
    return 1;
}

static int l_id(lua_State *L) {
    lua_pushstring(L, mql_client_id(check_client(L)));
    return 1;
}

/* ------------------------------------------------------------ operations */

static int push_op(lua_State *L, uint64_t op) {
    lua_pushinteger(L, (lua_Integer)op);
    return 1;
}

static int l_receive(lua_State *L) {
    mql_client *c = check_client(L);
    int batch = (int)luaL_checkinteger(L, 2);
    lua_Integer await_ms = luaL_checkinteger(L, 3);
    return push_op(L, mql_client_receive(c, batch, await_ms));
}

static int l_ack(lua_State *L) {
    mql_client *c = check_client(L);
    uint64_t ids[256];
    size_t i, n;
    luaL_checktype(L, 2, LUA_TTABLE);
    n = lua_rawlen(L, 2);
    luaL_argcheck(L, n > 0 && n <= 256, 2, "1 to 256 lease ids expected");
    for (i = 0; i < n; i++) {
        lua_rawgeti(L, 2, (int)i + 1);
        ids[i] = (uint64_t)luaL_checkinteger(L, -1);
        lua_pop(L, 1);
    }
    return push_op(L, mql_client_ack(c, ids, n));
}

static int l_dead_letter(lua_State *L) {
    mql_client *c = check_client(L);
    uint64_t id = (uint64_t)luaL_checkinteger(L, 2);
    return push_op(L, mql_client_dead_letter(c, id, luaL_optstring(L, 3, NULL)));
}

static int l_nack(lua_State *L) {
    mql_client *c = check_client(L);
    uint64_t id = (uint64_t)luaL_checkinteger(L, 2);
    lua_Integer delay_ms = luaL_checkinteger(L, 3);
    return push_op(L, mql_client_nack(c, id, delay_ms));
}

static int l_let_expire(lua_State *L) {
    mql_client *c = check_client(L);
    lua_pushboolean(L, mql_client_let_expire(c, (uint64_t)luaL_checkinteger(L, 2)));
    return 1;
}

static int l_send(lua_State *L) {
    mql_client *c = check_client(L);
    size_t len, i, nkeys = 0, nprops = 0;
    const char *topic = luaL_checkstring(L, 2);
    const char *body = luaL_checklstring(L, 3, &len);
    const char *tag = luaL_optstring(L, 4, NULL);
    const char **keys = NULL;
    mql_kv *props = NULL;
    uint64_t op;
    if (lua_istable(L, 5)) {
        nkeys = lua_rawlen(L, 5);
        keys = calloc(nkeys ? nkeys : 1, sizeof(*keys));
        for (i = 0; i < nkeys; i++) {
            lua_rawgeti(L, 5, (int)i + 1);
            keys[i] = lua_tostring(L, -1);   /* config.lua checked they are strings */
            lua_pop(L, 1);
        }
    }
    if (lua_istable(L, 6)) {
        lua_pushnil(L);
        while (lua_next(L, 6)) {
            nprops++;
            lua_pop(L, 1);
        }
        props = calloc(nprops ? nprops : 1, sizeof(*props));
        nprops = 0;
        lua_pushnil(L);
        while (lua_next(L, 6)) {
            /* keys and values stay referenced by the table until we return */
            if (lua_type(L, -2) == LUA_TSTRING && lua_type(L, -1) == LUA_TSTRING) {
                props[nprops].key = (char *)lua_tostring(L, -2);
                props[nprops].value = (char *)lua_tolstring(L, -1, &props[nprops].value_len);
                nprops++;
            }
            lua_pop(L, 1);
        }
    }
    op = mql_client_send(c, topic, (const uint8_t *)body, len, tag, keys, nkeys, props, nprops);
    free(keys);
    free(props);
    return push_op(L, op);
}

static int l_route(lua_State *L) {
    mql_client *c = check_client(L);
    return push_op(L, mql_client_route(c, luaL_checkstring(L, 2)));
}

static int l_terminate(lua_State *L) {
    return push_op(L, mql_client_terminate(check_client(L)));
}

/* client:lease(id) -> state, remaining_s, renewals, held_s; nil if not held any more */
static int l_lease(lua_State *L) {
    mql_client *c = check_client(L);
    mql_lease_info info;
    if (!mql_client_lease_info(c, (uint64_t)luaL_checkinteger(L, 2), &info)) {
        lua_pushnil(L);
        return 1;
    }
    lua_pushstring(L, mql_lease_state_name(info.state));
    lua_pushnumber(L, (lua_Number)info.remaining_ms / 1000.0);
    lua_pushinteger(L, info.renewals);
    lua_pushnumber(L, (lua_Number)info.held_ms / 1000.0);
    lua_pushboolean(L, info.uncertain);
    return 5;
}

static void push_hist(lua_State *L, const char *key, const mql_hist *h) {
    int i;
    lua_createtable(L, 0, 4);
    lua_createtable(L, MQL_HIST_BUCKETS, 0);
    for (i = 0; i < MQL_HIST_BUCKETS; i++) {
        lua_pushnumber(L, mql_hist_bounds[i]);
        lua_rawseti(L, -2, i + 1);
    }
    lua_setfield(L, -2, "bounds");
    lua_createtable(L, MQL_HIST_BUCKETS + 1, 0);
    for (i = 0; i <= MQL_HIST_BUCKETS; i++) {
        lua_pushinteger(L, (lua_Integer)h->counts[i]);
        lua_rawseti(L, -2, i + 1);
    }
    lua_setfield(L, -2, "counts");
    set_int(L, "count", (lua_Integer)h->count);
    set_num(L, "sum", h->sum);
    lua_setfield(L, -2, key);
}

/* A reason table as { reason = n, ... }. */
static void push_reasons(lua_State *L, const char *key, const mql_reason_table *t) {
    int i;
    lua_createtable(L, 0, t->n);
    for (i = 0; i < t->n; i++) set_int(L, t->r[i].reason, (lua_Integer)t->r[i].n);
    lua_setfield(L, -2, key);
}

static int l_metrics(lua_State *L) {
    mql_client *c = check_client(L);
    mql_metrics m;
    size_t inflight;
    int i;
    mql_client_metrics(c, &m, &inflight);
    lua_createtable(L, 0, 24);
    set_int(L, "received", (lua_Integer)m.received);
    set_int(L, "acks_ok", (lua_Integer)m.acks_ok);
    set_int(L, "acks_fail", (lua_Integer)m.acks_fail);
    set_int(L, "nacks_ok", (lua_Integer)m.nacks_ok);
    set_int(L, "nacks_fail", (lua_Integer)m.nacks_fail);
    set_int(L, "renew_success", (lua_Integer)m.renew_success);
    set_int(L, "renew_fail", (lua_Integer)m.renew_fail);
    set_int(L, "renew_uncertain", (lua_Integer)m.renew_uncertain);
    set_int(L, "expire_while_alive", (lua_Integer)m.expire_while_alive);
    set_int(L, "lost_expired", (lua_Integer)m.lost_expired);
    set_int(L, "lost_rejected", (lua_Integer)m.lost_rejected);
    set_int(L, "budget_expire", (lua_Integer)m.budget_expire);
    set_int(L, "budget_nack", (lua_Integer)m.budget_nack);
    set_int(L, "sent_ok", (lua_Integer)m.sent_ok);
    set_int(L, "sent_fail", (lua_Integer)m.sent_fail);
    set_int(L, "reconnects", (lua_Integer)m.reconnects);
    set_str(L, "session_state", m.session_state == MQL_CLIENT_READY ? "ready"
                                : m.session_state == MQL_CLIENT_STARTING ? "starting"
                                : m.session_state == MQL_CLIENT_FAILED ? "failed" : "closing");
    set_int(L, "inflight", (lua_Integer)inflight);
    push_reasons(L, "corrupted", &m.corrupted);
    push_reasons(L, "malformed", &m.malformed);
    push_reasons(L, "dead_lettered", &m.dead_lettered);
    set_int(L, "dead_letter_fail", (lua_Integer)m.dead_letter_fail);
    push_hist(L, "renew_latency", &m.renew_latency);
    push_hist(L, "renew_lateness", &m.renew_lateness);
    push_hist(L, "handler", &m.handler);
    lua_createtable(L, m.nerrors, 0);
    for (i = 0; i < m.nerrors; i++) {
        lua_createtable(L, 0, 3);
        set_str(L, "op", m.errors[i].op);
        set_str(L, "code", m.errors[i].code);
        set_int(L, "n", (lua_Integer)m.errors[i].n);
        lua_rawseti(L, -2, i + 1);
    }
    lua_setfield(L, -2, "errors");
    return 1;
}

static int l_nack_all(lua_State *L) {
    mql_client *c = check_client(L);
    return push_op(L, mql_client_nack_all(c, luaL_checkinteger(L, 2)));
}

static int l_cancel_receives(lua_State *L) {
    mql_client_cancel_receives(check_client(L));
    return 0;
}

/* close, __close and __gc share this: idempotent, joins the client's thread. */
static int l_close(lua_State *L) {
    lclient *lc = luaL_checkudata(L, 1, CLIENT_MT);
    if (lc->c) {
        mql_client_free(lc->c);
        lc->c = NULL;
    }
    return 0;
}

static int l_closed(lua_State *L) {
    lclient *lc = luaL_checkudata(L, 1, CLIENT_MT);
    lua_pushboolean(L, lc->c == NULL);
    return 1;
}

/* ------------------------------------------------------------ signals */

typedef struct lwatcher {
    mql_shutdown *s;
} lwatcher;

static int signal_number(const char *name) {
    if (strcmp(name, "TERM") == 0) return SIGTERM;
    if (strcmp(name, "INT") == 0) return SIGINT;
    if (strcmp(name, "HUP") == 0) return SIGHUP;
    if (strcmp(name, "QUIT") == 0) return SIGQUIT;
    return 0;
}

static const char *signal_name(int signo) {
    switch (signo) {
    case SIGTERM: return "TERM";
    case SIGINT: return "INT";
    case SIGHUP: return "HUP";
    case SIGQUIT: return "QUIT";
    }
    return NULL;
}

/* core.watch_signals({"TERM", "INT"}, {client, ...}, deadline_s, release_delay_s) -> watcher */
static int l_watch_signals(lua_State *L) {
    int signals[8], nsignals = 0, nclients = 0, i, n;
    mql_client *clients[16];
    char err[128];
    lwatcher *w;
    luaL_checktype(L, 1, LUA_TTABLE);
    luaL_checktype(L, 2, LUA_TTABLE);
    n = (int)lua_rawlen(L, 1);
    for (i = 1; i <= n && nsignals < 8; i++) {
        lua_rawgeti(L, 1, i);
        signals[nsignals] = signal_number(luaL_checkstring(L, -1));
        if (!signals[nsignals]) return luaL_error(L, "unknown signal '%s'", lua_tostring(L, -1));
        nsignals++;
        lua_pop(L, 1);
    }
    n = (int)lua_rawlen(L, 2);
    for (i = 1; i <= n && nclients < 16; i++) {
        lclient *lc;
        lua_rawgeti(L, 2, i);
        lc = luaL_checkudata(L, -1, CLIENT_MT);
        if (lc->c) clients[nclients++] = lc->c;
        lua_pop(L, 1);
    }
    w = lua_newuserdata(L, sizeof(*w));
    w->s = NULL;
    luaL_getmetatable(L, WATCHER_MT);
    lua_setmetatable(L, -2);
    w->s = mql_shutdown_new(signals, nsignals, clients, nclients,
                            (int64_t)(luaL_checknumber(L, 3) * 1000),
                            (int64_t)(luaL_checknumber(L, 4) * 1000), err, sizeof(err));
    if (!w->s) return luaL_error(L, "mqlease: %s", err);
    /* the clients must outlive the watcher: keep them referenced from it */
    lua_pushvalue(L, 2);
    lua_setuservalue(L, -2);
    return 1;
}

static mql_shutdown *check_watcher(lua_State *L) {
    lwatcher *w = luaL_checkudata(L, 1, WATCHER_MT);
    if (!w->s) luaL_error(L, "mqlease: the signal watcher is closed");
    return w->s;
}

static int l_watcher_fd(lua_State *L) {
    lua_pushinteger(L, mql_shutdown_fd(check_watcher(L)));
    return 1;
}

static int l_watcher_signal(lua_State *L) {
    const char *name = signal_name(mql_shutdown_signal(check_watcher(L)));
    if (name) lua_pushstring(L, name);
    else lua_pushnil(L);
    return 1;
}

static int l_watcher_done(lua_State *L) {
    mql_shutdown_done(check_watcher(L));
    return 0;
}

static int l_watcher_extend(lua_State *L) {
    mql_shutdown_extend(check_watcher(L), (int64_t)(luaL_checknumber(L, 2) * 1000));
    return 0;
}

static int l_watcher_close(lua_State *L) {
    lwatcher *w = luaL_checkudata(L, 1, WATCHER_MT);
    if (w->s) {
        mql_shutdown_free(w->s);
        w->s = NULL;
    }
    return 0;
}

static const luaL_Reg watcher_methods[] = {
    {"fd", l_watcher_fd}, {"signal", l_watcher_signal}, {"done", l_watcher_done},
    {"extend", l_watcher_extend},
    {"close", l_watcher_close}, {NULL, NULL}};

/* ------------------------------------------------------------ redis */

typedef struct lredis {
    mql_redis *r;
} lredis;

static mql_redis *check_redis(lua_State *L) {
    lredis *lr = luaL_checkudata(L, 1, REDIS_MT);
    if (!lr->r) luaL_error(L, "mqlease: the redis client is closed");
    return lr->r;
}

/* The strings of the array cfg[key] ("host:port" nodes); the table keeps them alive. */
static int opt_nodes(lua_State *L, int t, const char *key, const char **out, int max) {
    int n = 0;
    lua_getfield(L, t, key);
    if (lua_istable(L, -1)) {
        for (n = 0; n < max; n++) {
            lua_rawgeti(L, -1, n + 1);
            if (lua_isnil(L, -1)) {
                lua_pop(L, 1);
                break;
            }
            out[n] = luaL_checkstring(L, -1);
            lua_pop(L, 1);
        }
    }
    lua_pop(L, 1);
    return n;
}

/* core.redis{host=, port=, unix=, username=, password=, db=, timeout_ms=,
 *            master=, cluster=, nodes={"h:p", ...}} -> client */
static int l_redis(lua_State *L) {
    mql_redis_config cfg;
    const char *nodes[64];
    char err[128];
    lredis *lr;
    luaL_checktype(L, 1, LUA_TTABLE);
    memset(&cfg, 0, sizeof(cfg));
    cfg.nodes = nodes;
    cfg.nnodes = opt_nodes(L, 1, "nodes", nodes, 64);
    cfg.master = opt_string(L, 1, "master");
    cfg.cluster = opt_bool(L, 1, "cluster", 0);
    cfg.host = opt_string(L, 1, "host");
    cfg.port = (int)opt_int(L, 1, "port", 6379);
    cfg.unix_path = opt_string(L, 1, "unix");
    cfg.username = opt_string(L, 1, "username");
    cfg.password = opt_string(L, 1, "password");
    cfg.db = (int)opt_int(L, 1, "db", 0);
    cfg.timeout_ms = opt_int(L, 1, "timeout_ms", 1000);
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

static int l_redis_keepalive(lua_State *L) {
    mql_redis *r = check_redis(L);
    const char *key = luaL_checkstring(L, 2), *owner = luaL_checkstring(L, 3);
    lua_Integer ttl = luaL_checkinteger(L, 4), every = luaL_checkinteger(L, 5);
    lua_Integer max = luaL_optinteger(L, 6, 0);
    lua_pushinteger(L, (lua_Integer)mql_redis_keepalive(r, key, owner, ttl, every, max));
    return 1;
}

static int l_redis_keepalive_stop(lua_State *L) {
    lua_pushboolean(L, mql_redis_keepalive_stop(check_redis(L), (uint64_t)luaL_checkinteger(L, 2)));
    return 1;
}

static int l_redis_fd(lua_State *L) {
    lua_pushinteger(L, mql_redis_fd(check_redis(L)));
    return 1;
}

static int l_redis_events(lua_State *L) {
    mql_redis *r = check_redis(L);
    push_events(L, mql_redis_take_events(r), requeue_redis_events, r);
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
    {"command", l_redis_command}, {"eval", l_redis_eval}, {"keepalive", l_redis_keepalive},
    {"keepalive_stop", l_redis_keepalive_stop}, {"fd", l_redis_fd}, {"events", l_redis_events},
    {"close", l_redis_close}, {"closed", l_redis_closed}, {NULL, NULL}};

/* ------------------------------------------------------------ module functions */

/* core.wait(fd, timeout_s) -> true when fd is readable, false on timeout.
 * The one place a plain script blocks; coroutines yield instead (lua/mqlease/wait.lua). */
static int l_wait(lua_State *L) {
    struct pollfd p;
    lua_Number t = luaL_optnumber(L, 2, -1);
    int ms = t < 0 ? -1 : (int)(t * 1000.0 + 0.5), rc;
    p.fd = (int)luaL_checkinteger(L, 1);
    p.events = POLLIN;
    p.revents = 0;
    do {
        rc = poll(&p, 1, ms);
    } while (rc < 0 && errno == EINTR && ms < 0);
    lua_pushboolean(L, rc > 0);
    return 1;
}

/* core.poll({fd, ...}, timeout_s) -> array of readable fds (empty on timeout). */
static int l_poll(lua_State *L) {
    struct pollfd ps[256];
    size_t n, i;
    int k = 0, ms;
    lua_Number t = luaL_optnumber(L, 2, -1);
    luaL_checktype(L, 1, LUA_TTABLE);
    n = lua_rawlen(L, 1);
    luaL_argcheck(L, n <= 256, 1, "at most 256 descriptors");
    for (i = 0; i < n; i++) {
        lua_rawgeti(L, 1, (int)i + 1);
        ps[i].fd = (int)luaL_checkinteger(L, -1);
        ps[i].events = POLLIN;
        ps[i].revents = 0;
        lua_pop(L, 1);
    }
    ms = t < 0 ? -1 : (int)(t * 1000.0 + 0.5);
    lua_newtable(L);
    if (poll(ps, (nfds_t)n, ms) > 0) {
        for (i = 0; i < n; i++) {
            if (ps[i].revents) {
                lua_pushinteger(L, ps[i].fd);
                lua_rawseti(L, -2, ++k);
            }
        }
    }
    return 1;
}

static int l_now(lua_State *L) {
    lua_pushnumber(L, (lua_Number)mql_now_ms() / 1000.0);
    return 1;
}

/* core.sleep(s): blocks the whole VM, as a badly behaved handler would. */
static int l_sleep(lua_State *L) {
    lua_Number s = luaL_checknumber(L, 1);
    struct timespec ts;
    ts.tv_sec = (time_t)s;
    ts.tv_nsec = (long)((s - (lua_Number)ts.tv_sec) * 1e9);
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR) {
    }
    return 0;
}

static const luaL_Reg client_methods[] = {
    {"events", l_events},   {"fd", l_fd},         {"id", l_id},
    {"receive", l_receive}, {"ack", l_ack},       {"nack", l_nack},
    {"let_expire", l_let_expire}, {"send", l_send}, {"terminate", l_terminate},
    {"route", l_route}, {"nack_all", l_nack_all}, {"cancel_receives", l_cancel_receives},
    {"lease", l_lease},     {"metrics", l_metrics}, {"dead_letter", l_dead_letter},
    {"close", l_close},     {"closed", l_closed}, {NULL, NULL}};

static const luaL_Reg module_functions[] = {
    {"consumer", l_consumer}, {"producer", l_producer}, {"wait", l_wait}, {"poll", l_poll},
    {"now", l_now},           {"sleep", l_sleep},       {"watch_signals", l_watch_signals},
    {"redis", l_redis},       {NULL, NULL}};

LUALIB_API int luaopen_mqlease_core(lua_State *L);

LUALIB_API int luaopen_mqlease_core(lua_State *L) {
    if (luaL_newmetatable(L, CLIENT_MT)) {
        lua_newtable(L);
        luaL_setfuncs(L, client_methods, 0);
        lua_setfield(L, -2, "__index");
        lua_pushcfunction(L, l_close);
        lua_setfield(L, -2, "__gc");
        lua_pushcfunction(L, l_close);
        lua_setfield(L, -2, "__close");
    }
    lua_pop(L, 1);
    if (luaL_newmetatable(L, WATCHER_MT)) {
        lua_newtable(L);
        luaL_setfuncs(L, watcher_methods, 0);
        lua_setfield(L, -2, "__index");
        lua_pushcfunction(L, l_watcher_close);
        lua_setfield(L, -2, "__gc");
    }
    lua_pop(L, 1);
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
    luaL_newlib(L, module_functions);
    PUSH_NULL(L);
    lua_setfield(L, -2, "null");
    lua_pushstring(L, MQL_VERSION);
    lua_setfield(L, -2, "_VERSION");
    return 1;
}
