/* lmqlease.c -- mqlease.core: the Lua binding of the C core (the module,
 * consumers and producers; see lmqlease.h for the other files).
 *
 * Every function here is non-blocking (the waits are lmql_clock.c's):
 * operations return an op id at once and
 * their results come back from client:events() once client:fd() is readable.
 * The Lua modules in lua/mqlease/ turn that into calls that wait (and yield inside
 * coroutines). Arguments are validated by lua/mqlease/config.lua before they
 * get here; what is checked here raises, as a programmer error would.
 */
#include "lmqlease.h"

#include <stdlib.h>
#include <string.h>

mql_client *lmql_check_client(lua_State *L) {
    lclient *lc = luaL_checkudata(L, 1, CLIENT_MT);
    if (!lc->c) luaL_error(L, "mqlease: the client is closed");
    return lc->c;
}

/* ------------------------------------------------------------ config */

/* Pushes t[key] (t: an absolute index) without metamethods. The option
 * readers hand out pointers into strings that only the config table keeps
 * alive while the client is made: an __index could make a string nothing
 * references, or run Lua code that drops one read before, and the collector
 * would free it under us. */
static void opt_get(lua_State *L, int t, const char *key) {
    lua_pushstring(L, key);
    lua_rawget(L, t);
}

/* The string at the top of the stack, which a table holds: a number is
 * refused, not converted -- luaL_checkstring would convert the stack's copy
 * only, a string freed once popped. */
const char *lmql_table_string(lua_State *L, const char *what) {
    if (lua_type(L, -1) != LUA_TSTRING)
        luaL_error(L, "mqlease.core: %s must be a string (got %s)", what, luaL_typename(L, -1));
    return lua_tostring(L, -1);
}

const char *lmql_opt_string(lua_State *L, int t, const char *key) {
    const char *s;
    opt_get(L, t, key);
    s = lua_isnil(L, -1) ? NULL : lmql_table_string(L, key);
    lua_pop(L, 1);   /* the config table keeps the string alive */
    return s;
}

lua_Integer lmql_opt_int(lua_State *L, int t, const char *key, lua_Integer def) {
    lua_Integer v;
    opt_get(L, t, key);
    v = lua_isnil(L, -1) ? def : (lua_Integer)luaL_checknumber(L, -1);
    lua_pop(L, 1);
    return v;
}

int lmql_opt_bool(lua_State *L, int t, const char *key, int def) {
    int v;
    opt_get(L, t, key);
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
    cfg.endpoint = lmql_opt_string(L, 1, "endpoint");
    if (!cfg.endpoint) return luaL_error(L, "mqlease.core: endpoint is required");
    cfg.namespace_ = lmql_opt_string(L, 1, "namespace");
    cfg.access_key = lmql_opt_string(L, 1, "access_key");
    cfg.secret_key = lmql_opt_string(L, 1, "secret_key");
    cfg.security_token = lmql_opt_string(L, 1, "security_token");
    cfg.tls = lmql_opt_bool(L, 1, "tls", 0);
    cfg.tls_insecure = lmql_opt_bool(L, 1, "tls_insecure", 0);
    cfg.tls_ca_pem = lmql_opt_string(L, 1, "tls_ca_pem");
    cfg.tls_cert_pem = lmql_opt_string(L, 1, "tls_cert_pem");
    cfg.tls_key_pem = lmql_opt_string(L, 1, "tls_key_pem");
    cfg.tls_server_name = lmql_opt_string(L, 1, "tls_server_name");
    cfg.request_timeout_ms = lmql_opt_int(L, 1, "request_timeout_ms", 3000);
    cfg.group = lmql_opt_string(L, 1, "group");
    cfg.topic = lmql_opt_string(L, 1, "topic");
    cfg.filter = lmql_opt_string(L, 1, "filter");
    cfg.filter_sql = lmql_opt_bool(L, 1, "filter_sql", 0);
    cfg.lite = lmql_opt_bool(L, 1, "lite", 0);
    cfg.lite_sync_every_ms = lmql_opt_int(L, 1, "lite_sync_every_ms", 30000);
    cfg.invisible_ms = lmql_opt_int(L, 1, "invisible_ms", 30000);
    cfg.invisible_auto = lmql_opt_bool(L, 1, "invisible_auto", 0);
    cfg.auto_min_ms = lmql_opt_int(L, 1, "auto_min_ms", 10000);
    cfg.auto_max_ms = lmql_opt_int(L, 1, "auto_max_ms", 600000);
    cfg.auto_margin_pct = (int)lmql_opt_int(L, 1, "auto_margin_pct", 200);
    cfg.renew = lmql_opt_bool(L, 1, "renew", 1);
    cfg.renew_every_ms = lmql_opt_int(L, 1, "renew_every_ms", 0);
    cfg.max_renewals = (int)lmql_opt_int(L, 1, "max_renewals", -1);
    cfg.max_lease_ms = lmql_opt_int(L, 1, "max_lease_ms", 3600000);
    budget = lmql_opt_string(L, 1, "on_budget");
    cfg.on_budget = budget && strcmp(budget, "nack") == 0 ? MQL_BUDGET_NACK : MQL_BUDGET_EXPIRE;
    cfg.release_delay_ms = lmql_opt_int(L, 1, "release_delay_ms", 0);
    budget = lmql_opt_string(L, 1, "on_corrupt");
    cfg.on_corrupt_dlq = !(budget && strcmp(budget, "nack") == 0);
    cfg.corrupt_delay_ms = lmql_opt_int(L, 1, "corrupt_delay_ms", 0);
    cfg.max_body = lmql_opt_int(L, 1, "max_body", 0);
    opt_get(L, 1, "topics");
    if (lua_istable(L, -1)) {
        n = lua_rawlen(L, -1);
        if (n > 64) return luaL_error(L, "mqlease.core: at most 64 topics");
        for (i = 0; i < n; i++) {
            lua_rawgeti(L, -1, (int)i + 1);
            topics[i] = lmql_table_string(L, "a topic");
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


/* The hooks of client:events() are given the client's userdata, not its core
 * client, and look at lc->c when they run: making the events allocates, the
 * collector may then run a finalizer that closes this very client (a consumer
 * dropped without close() does), and close frees the core client. A client
 * closed meanwhile takes nothing back: its queue is gone, and what it held
 * was given back or left to expire by the close. */
static void requeue_client_events(void *owner, mql_event *list) {
    lclient *lc = owner;
    if (lc->c) {
        mql_client_requeue_events(lc->c, list);
        return;
    }
    lmql_free_events(list);
}

static void client_event_dropped(void *owner, mql_event *ev) {
    lclient *lc = owner;
    if (lc->c) mql_client_event_dropped(lc->c, ev);
}

static const lmql_event_hooks client_event_hooks = {requeue_client_events, client_event_dropped};

/* client:events() -> array of event tables; drains the fd. The userdata stays
 * at index 1, so the hooks' owner outlives the push. */
static int l_events(lua_State *L) {
    mql_client *c = lmql_check_client(L);
    lmql_push_events(L, mql_client_take_events(c), &client_event_hooks,
                     luaL_checkudata(L, 1, CLIENT_MT));
    return 1;
}

static int l_fd(lua_State *L) {
    lua_pushinteger(L, mql_client_fd(lmql_check_client(L)));
    return 1;
}

static int l_id(lua_State *L) {
    lua_pushstring(L, mql_client_id(lmql_check_client(L)));
    return 1;
}


/* ------------------------------------------------------------ operations */

static int push_op(lua_State *L, uint64_t op) {
    lua_pushinteger(L, (lua_Integer)op);
    return 1;
}

static int l_receive(lua_State *L) {
    mql_client *c = lmql_check_client(L);
    int batch = (int)luaL_checkinteger(L, 2);
    lua_Integer await_ms = luaL_checkinteger(L, 3);
    lua_Integer max_bytes = luaL_optinteger(L, 4, 0);   /* 0: no byte bound */
    return push_op(L, mql_client_receive(c, batch, await_ms, max_bytes > 0 ? (size_t)max_bytes : 0));
}

static int l_ack(lua_State *L) {
    mql_client *c = lmql_check_client(L);
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
    mql_client *c = lmql_check_client(L);
    uint64_t id = (uint64_t)luaL_checkinteger(L, 2);
    return push_op(L, mql_client_dead_letter(c, id, luaL_optstring(L, 3, NULL)));
}

static int l_nack(lua_State *L) {
    mql_client *c = lmql_check_client(L);
    uint64_t id = (uint64_t)luaL_checkinteger(L, 2);
    lua_Integer delay_ms = luaL_checkinteger(L, 3);
    return push_op(L, mql_client_nack(c, id, delay_ms));
}

static int l_let_expire(lua_State *L) {
    mql_client *c = lmql_check_client(L);
    lua_pushboolean(L, mql_client_let_expire(c, (uint64_t)luaL_checkinteger(L, 2)));
    return 1;
}

/* client:send(topic, body, tag, keys, properties, message_group, deliver_at_ms, delay_ms,
 * trace_context, priority, transaction, recovery_ms, lite_topic): config.lua has checked every argument (and that at most one of
 * message_group, deliver_at_ms and delay_ms is set); deliver_at_ms is wall-clock ms since the epoch, delay_ms is
 * counted from now on this host's wall clock, as the official clients do. */
static int l_send(lua_State *L) {
    mql_client *c = lmql_check_client(L);
    size_t len, i, nprops = 0;
    const char *topic = luaL_checkstring(L, 2);
    const char *body = luaL_checklstring(L, 3, &len);
    mql_send_opts o;
    mql_kv *props = NULL;
    uint64_t op;
    memset(&o, 0, sizeof(o));
    /* Every argument that may raise is read before the arrays below, and the
     * arrays are userdata Lua owns: a raise (or a failed allocation) leaves
     * nothing behind. They stay on the stack until we return. */
    o.tag = luaL_optstring(L, 4, NULL);
    o.message_group = luaL_optstring(L, 7, NULL);
    o.delivery_ms = (int64_t)luaL_optinteger(L, 8, 0);
    if (!lua_isnoneornil(L, 9)) o.delivery_ms = mql_wall_ms() + (int64_t)luaL_checkinteger(L, 9);
    o.trace_context = luaL_optstring(L, 10, NULL);
    if (!lua_isnoneornil(L, 11)) {
        o.has_priority = 1;
        o.priority = (int32_t)luaL_checkinteger(L, 11);
    }
    o.transaction = lua_toboolean(L, 12);   /* a half message (producer:begin) */
    o.recovery_ms = (int64_t)luaL_optinteger(L, 13, 0);
    o.lite_topic = luaL_optstring(L, 14, NULL);
    if (lua_istable(L, 5)) {
        o.nkeys = lua_rawlen(L, 5);
        o.keys = lua_newuserdata(L, (o.nkeys ? o.nkeys : 1) * sizeof(*o.keys));
        for (i = 0; i < o.nkeys; i++) {
            lua_rawgeti(L, 5, (int)i + 1);
            /* config.lua checks them; a hole here would be a NULL protobuf-c packs
             * with strlen, and a number a string gone once popped */
            if (lua_type(L, -1) != LUA_TSTRING) return luaL_error(L, "send: keys[%d] is not a string", (int)i + 1);
            o.keys[i] = lua_tostring(L, -1);
            lua_pop(L, 1);
        }
    }
    if (lua_istable(L, 6)) {
        lua_pushnil(L);
        while (lua_next(L, 6)) {
            nprops++;
            lua_pop(L, 1);
        }
        props = lua_newuserdata(L, (nprops ? nprops : 1) * sizeof(*props));
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
    o.props = props;
    o.nprops = nprops;
    op = mql_client_send(c, topic, (const uint8_t *)body, len, &o);
    return push_op(L, op);
}

/* client:sync_lite(action, {lite topic, ...}) -> op: SyncLiteSubscription (mql_lite.h);
 * action is apache.rocketmq.v2.LiteSubscriptionAction (0 add, 1 remove, 2 set, 3 clear). */
static int l_sync_lite(lua_State *L) {
    mql_client *c = lmql_check_client(L);
    int action = (int)luaL_checkinteger(L, 2);
    const char **names;
    size_t n, i;
    luaL_checktype(L, 3, LUA_TTABLE);
    n = lua_rawlen(L, 3);
    names = lua_newuserdata(L, (n ? n : 1) * sizeof(*names));   /* Lua owns it: a raise leaks nothing */
    for (i = 0; i < n; i++) {
        lua_rawgeti(L, 3, (int)i + 1);
        names[i] = lmql_table_string(L, "a lite topic");   /* the table keeps it referenced */
        lua_pop(L, 1);
    }
    return push_op(L, mql_client_sync_lite(c, action, names, n));
}

/* client:recall(topic, recall_handle) -> op */
static int l_recall(lua_State *L) {
    mql_client *c = lmql_check_client(L);
    const char *topic = luaL_checkstring(L, 2);
    return push_op(L, mql_client_recall(c, topic, luaL_checkstring(L, 3)));
}

/* client:end_transaction(topic, message_id, transaction_id, commit, from_check, trace_context) */
static int l_end_transaction(lua_State *L) {
    mql_client *c = lmql_check_client(L);
    const char *topic = luaL_checkstring(L, 2);
    const char *message_id = luaL_checkstring(L, 3);
    const char *transaction_id = luaL_checkstring(L, 4);
    int commit = lua_toboolean(L, 5), from_check = lua_toboolean(L, 6);
    const char *trace = luaL_optstring(L, 7, NULL);
    return push_op(L, mql_client_end_transaction(c, topic, message_id, transaction_id, commit,
                                                 from_check, trace));
}

static int l_route(lua_State *L) {
    mql_client *c = lmql_check_client(L);
    return push_op(L, mql_client_route(c, luaL_checkstring(L, 2)));
}

static int l_terminate(lua_State *L) {
    return push_op(L, mql_client_terminate(lmql_check_client(L)));
}

/* client:lease(id) -> state, remaining_s, renewals, held_s; nil if not held any more */
static int l_lease(lua_State *L) {
    mql_client *c = lmql_check_client(L);
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
    lmql_set_int(L, "count", (lua_Integer)h->count);
    lmql_set_num(L, "sum", h->sum);
    lua_setfield(L, -2, key);
}

/* A reason table as { reason = n, ... }. */
static void push_reasons(lua_State *L, const char *key, const mql_reason_table *t) {
    int i;
    lua_createtable(L, 0, t->n);
    for (i = 0; i < t->n; i++) lmql_set_int(L, t->r[i].reason, (lua_Integer)t->r[i].n);
    lua_setfield(L, -2, key);
}

/* The server's retry policy as { max_attempts =, initial =, max =, multiplier = }
 * (exponential) or { max_attempts =, steps = { s, ... } } (customized), in
 * seconds; absent until the server sent one. */
static void push_retry_policy(lua_State *L, const mql_retry_policy *p) {
    int i;
    if (p->max_attempts <= 0) return;
    lua_createtable(L, 0, 4);
    lmql_set_int(L, "max_attempts", p->max_attempts);
    if (p->customized) {
        lua_createtable(L, p->nsteps, 0);
        for (i = 0; i < p->nsteps; i++) {
            lua_pushnumber(L, (lua_Number)p->steps_ms[i] / 1000.0);
            lua_rawseti(L, -2, i + 1);
        }
        lua_setfield(L, -2, "steps");
    } else {
        lua_pushnumber(L, (lua_Number)p->initial_ms / 1000.0);
        lua_setfield(L, -2, "initial");
        lua_pushnumber(L, (lua_Number)p->max_ms / 1000.0);
        lua_setfield(L, -2, "max");
        lua_pushnumber(L, (lua_Number)p->multiplier);
        lua_setfield(L, -2, "multiplier");
    }
    lua_setfield(L, -2, "retry_policy");
}

static int l_metrics(lua_State *L) {
    mql_client *c = lmql_check_client(L);
    mql_metrics m;
    size_t inflight;
    int i;
    mql_client_metrics(c, &m, &inflight);
    lua_createtable(L, 0, 24);
    lmql_set_int(L, "received", (lua_Integer)m.received);
    lmql_set_int(L, "acks_ok", (lua_Integer)m.acks_ok);
    lmql_set_int(L, "acks_fail", (lua_Integer)m.acks_fail);
    lmql_set_int(L, "nacks_ok", (lua_Integer)m.nacks_ok);
    lmql_set_int(L, "nacks_fail", (lua_Integer)m.nacks_fail);
    lmql_set_int(L, "renew_success", (lua_Integer)m.renew_success);
    lmql_set_int(L, "renew_fail", (lua_Integer)m.renew_fail);
    lmql_set_int(L, "renew_uncertain", (lua_Integer)m.renew_uncertain);
    lmql_set_int(L, "expire_while_alive", (lua_Integer)m.expire_while_alive);
    lmql_set_int(L, "lost_expired", (lua_Integer)m.lost_expired);
    lmql_set_int(L, "lost_rejected", (lua_Integer)m.lost_rejected);
    lmql_set_int(L, "budget_expire", (lua_Integer)m.budget_expire);
    lmql_set_int(L, "budget_nack", (lua_Integer)m.budget_nack);
    lmql_set_int(L, "sent_ok", (lua_Integer)m.sent_ok);
    lmql_set_int(L, "sent_fail", (lua_Integer)m.sent_fail);
    lmql_set_int(L, "orphan_checks", (lua_Integer)m.orphan_checks);
    lmql_set_int(L, "reconnects", (lua_Integer)m.reconnects);
    lmql_set_int(L, "releases_held", (lua_Integer)m.releases_held);
    lmql_set_int(L, "events_dropped", (lua_Integer)m.events_dropped);
    lmql_set_int(L, "receives_held", (lua_Integer)m.receives_held);
    lmql_set_int(L, "receives_held_empty", (lua_Integer)m.receives_held_empty);
    lua_pushnumber(L, (lua_Number)m.renew_queue_age_ms / 1000.0);
    lua_setfield(L, -2, "renew_queue_age_seconds");
    lua_pushnumber(L, (lua_Number)m.renew_queue_age_max_ms / 1000.0);
    lua_setfield(L, -2, "renew_queue_age_max_seconds");
    lmql_set_str(L, "session_state", m.session_state == MQL_CLIENT_READY ? "ready"
                                : m.session_state == MQL_CLIENT_STARTING ? "starting"
                                : m.session_state == MQL_CLIENT_FAILED ? "failed"
                                : m.session_state == MQL_CLIENT_RECONNECTING ? "reconnecting" : "closing");
    lmql_set_int(L, "inflight", (lua_Integer)inflight);
    lua_pushnumber(L, (lua_Number)m.invisible_ms / 1000.0);
    lua_setfield(L, -2, "invisible_seconds");
    lua_pushboolean(L, m.fifo);
    lua_setfield(L, -2, "fifo");
    push_retry_policy(L, &m.retry);
    push_reasons(L, "corrupted", &m.corrupted);
    push_reasons(L, "malformed", &m.malformed);
    push_reasons(L, "dead_lettered", &m.dead_lettered);
    push_reasons(L, "given_back", &m.given_back);
    lmql_set_int(L, "dead_letter_fail", (lua_Integer)m.dead_letter_fail);
    push_hist(L, "renew_latency", &m.renew_latency);
    push_hist(L, "renew_lateness", &m.renew_lateness);
    push_hist(L, "handler", &m.handler);
    lua_createtable(L, m.nerrors, 0);
    for (i = 0; i < m.nerrors; i++) {
        lua_createtable(L, 0, 3);
        lmql_set_str(L, "op", m.errors[i].op);
        lmql_set_str(L, "code", m.errors[i].code);
        lmql_set_int(L, "n", (lua_Integer)m.errors[i].n);
        lua_rawseti(L, -2, i + 1);
    }
    lua_setfield(L, -2, "errors");
    return 1;
}

static int l_nack_all(lua_State *L) {
    mql_client *c = lmql_check_client(L);
    return push_op(L, mql_client_nack_all(c, luaL_checkinteger(L, 2)));
}

static int l_cancel_receives(lua_State *L) {
    mql_client_cancel_receives(lmql_check_client(L));
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

static const luaL_Reg client_methods[] = {
    {"events", l_events},   {"fd", l_fd},         {"id", l_id},
    {"receive", l_receive}, {"ack", l_ack},       {"nack", l_nack},
    {"let_expire", l_let_expire}, {"send", l_send}, {"recall", l_recall}, {"sync_lite", l_sync_lite}, {"terminate", l_terminate},
    {"end_transaction", l_end_transaction},
    {"route", l_route}, {"nack_all", l_nack_all}, {"cancel_receives", l_cancel_receives},
    {"lease", l_lease},     {"metrics", l_metrics}, {"dead_letter", l_dead_letter},
    {"close", l_close},     {"closed", l_closed}, {NULL, NULL}};

static const luaL_Reg module_functions[] = {
    {"consumer", l_consumer}, {"producer", l_producer}, {"wait", lmql_wait}, {"poll", lmql_poll},
    {"now", lmql_now},        {"wall", lmql_wall},      {"sleep", lmql_sleep},       {"watch_signals", lmql_watch_signals},
    {"redis", lmql_redis},       {"eo_key", lmql_eo_key},   {"exec", lmql_exec},
    {"spawn", lmql_spawn},    {"reap", lmql_reap},      {NULL, NULL}};

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
    lmql_open_signals(L);
    lmql_open_redis(L);
    luaL_newlib(L, module_functions);
    lmql_open_message(L);
    LMQL_PUSH_NULL(L);
    lua_setfield(L, -2, "null");
    lua_pushstring(L, MQL_VERSION);
    lua_setfield(L, -2, "_VERSION");
    return 1;
}

