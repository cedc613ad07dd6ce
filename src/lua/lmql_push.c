/* lmql_push.c -- what the core hands Lua, as Lua values: results, messages,
 * Redis replies and event lists (see lmqlease.h).
 *
 * Event lists are turned into tables one event at a time, each in a protected
 * call: an event that cannot be made is skipped and reported, never allowed
 * to block the ones behind it (see lmql_push_events).
 */
#include "lmqlease.h"

#include <string.h>

const char lmql_null = 0;


void lmql_set_str(lua_State *L, const char *key, const char *v) {
    if (!v) return;
    lua_pushstring(L, v);
    lua_setfield(L, -2, key);
}

void lmql_set_int(lua_State *L, const char *key, lua_Integer v) {
    lua_pushinteger(L, v);
    lua_setfield(L, -2, key);
}

void lmql_set_num(lua_State *L, const char *key, lua_Number v) {
    lua_pushnumber(L, v);
    lua_setfield(L, -2, key);
}

void lmql_push_result_fields(lua_State *L, const mql_result *r) {
    lua_pushboolean(L, r->ok);
    lua_setfield(L, -2, "ok");
    if (!r->ok) {
        lmql_set_str(L, "err", r->msg);
        lmql_set_str(L, "code", r->code);
    }
}

static const char *message_type_name(int t) {
    switch (t) {
    case 1: return "NORMAL";
    case 2: return "FIFO";
    case 3: return "DELAY";
    case 4: return "TRANSACTION";
    case 5: return "LITE";
    case 6: return "PRIORITY";
    default: return NULL;
    }
}

/* A message is held by the million, so its table keeps only what differs
 * from message to message; the rest -- topic, tag, hosts, type, queue and
 * delivery attempt, equal for most messages of a consumer -- goes into a
 * shape that the Lua side turns into the __index of a shared metatable
 * (lua/mqlease/message.lua).
 *
 * The fields every message has sit in the table's array part, by slot, and
 * that __index finds them by name (message.lua's SLOTS must follow this
 * order): an array slot is a 16-byte TValue where a hash node is 24 bytes and
 * the node part rounds up to a power of two, so 6 fields cost 96 bytes
 * instead of 8 nodes' 192 (Lua 5.4's lobject.h: TValue, Node). The fields few
 * messages have stay in the hash part under their names, as before.
 *
 * Field names follow the Java client's MessageView getters in snake_case;
 * times are epoch seconds (like os.time(), with milliseconds as fractions).
 * The lease slot holds the core's lease id: the Lua side makes the lease
 * object from it when it is first asked for. LuaJIT has one more slot: the
 * proxy whose __gc stands for the table's (tables have no __gc there). */
enum {
    MSG_ID = 1, MSG_BODY, MSG_OFFSET, MSG_BORN_AT, MSG_STORE_AT, MSG_LEASE,
    MSG_SLOTS = MSG_LEASE + (LUA_VERSION_NUM < 502)
};

static void push_message(lua_State *L, const mql_message *m) {
    int n = (m->delivery_ms != 0) + (m->trace_context != NULL) + (m->message_group != NULL)
          + (m->nkeys > 0) + (m->nprops > 0) + (m->has_priority != 0) + (m->lite_topic != NULL);
    lua_createtable(L, MSG_SLOTS, n);
    if (m->id) {
        lua_pushstring(L, m->id);
        lua_rawseti(L, -2, MSG_ID);
    }
    lua_pushlstring(L, (const char *)m->body, m->body_len);
    lua_rawseti(L, -2, MSG_BODY);
    lua_pushinteger(L, (lua_Integer)m->queue_offset);
    lua_rawseti(L, -2, MSG_OFFSET);
    lua_pushnumber(L, (lua_Number)m->born_ms / 1000.0);
    lua_rawseti(L, -2, MSG_BORN_AT);
    if (m->store_ms) {
        lua_pushnumber(L, (lua_Number)m->store_ms / 1000.0);
        lua_rawseti(L, -2, MSG_STORE_AT);
    }
    lua_pushinteger(L, (lua_Integer)m->lease_id);
    lua_rawseti(L, -2, MSG_LEASE);
    lmql_set_rare_fields(L, m);
}

/* The fields few messages have, into the table on top of the stack: a half
 * message's (push_message) and a received message's own table (lmql_message.c). */
void lmql_set_rare_fields(lua_State *L, const mql_message *m) {
    size_t i;
    if (m->delivery_ms) lmql_set_num(L, "delivery_timestamp", (lua_Number)m->delivery_ms / 1000.0);
    lmql_set_str(L, "trace_context", m->trace_context);
    lmql_set_str(L, "message_group", m->message_group);
    if (m->has_priority) lmql_set_int(L, "priority", m->priority);
    lmql_set_str(L, "lite_topic", m->lite_topic);
    if (m->nkeys > 0) {
        lua_createtable(L, (int)m->nkeys, 0);
        for (i = 0; i < m->nkeys; i++) {
            lua_pushstring(L, m->keys[i]);
            lua_rawseti(L, -2, (int)i + 1);
        }
        lua_setfield(L, -2, "keys");
    }
    if (m->nprops > 0) {
        lua_createtable(L, 0, (int)m->nprops);
        for (i = 0; i < m->nprops; i++) {
            lua_pushlstring(L, m->props[i].value, m->props[i].value_len);
            lua_setfield(L, -2, m->props[i].key);
        }
        lua_setfield(L, -2, "properties");
    }
}

static int same_str(const char *a, const char *b) {
    return a == b || (a && b && strcmp(a, b) == 0);
}

static int same_shape(const mql_message *a, const mql_message *b) {
    return a->message_type == b->message_type && a->queue_id == b->queue_id
        && a->delivery_attempt == b->delivery_attempt && same_str(a->topic, b->topic)
        && same_str(a->tag, b->tag) && same_str(a->born_host, b->born_host)
        && same_str(a->store_host, b->store_host);
}

/* The shape of msgs[i]: the table of an earlier message of the batch with the
 * same shape (from the shapes array at the top of the stack), else a new one. */
static void push_new_shape(lua_State *L, const mql_message *m);

static void push_shape(lua_State *L, const mql_message *msgs, size_t i) {
    const mql_message *m = &msgs[i];
    size_t j;
    for (j = 0; j < i; j++) {
        if (same_shape(&msgs[j], m)) {
            lua_rawgeti(L, -1, (lua_Integer)j + 1);
            return;
        }
    }
    push_new_shape(L, m);
}

static void push_new_shape(lua_State *L, const mql_message *m) {
    lua_createtable(L, 0, 7);
    lmql_set_str(L, "topic", m->topic);
    lmql_set_str(L, "tag", m->tag);
    lmql_set_str(L, "born_host", m->born_host);
    lmql_set_str(L, "store_host", m->store_host);
    lmql_set_str(L, "message_type", message_type_name(m->message_type));
    lmql_set_int(L, "queue_id", m->queue_id);
    lmql_set_int(L, "delivery_attempt", m->delivery_attempt);
}

void lmql_push_reply(lua_State *L, const mql_reply *r) {
    size_t i;
    /* nested arrays recurse: make room for each level (hiredis bounds the depth) */
    luaL_checkstack(L, 3, "mqlease: Redis reply nested too deeply");
    switch (r->type) {
    case MQL_REPLY_NIL: LMQL_PUSH_NULL(L); break;
    case MQL_REPLY_INTEGER: lua_pushinteger(L, (lua_Integer)r->integer); break;
    case MQL_REPLY_STRING:
    case MQL_REPLY_STATUS:
    case MQL_REPLY_ERROR: lua_pushlstring(L, r->str ? r->str : "", r->len); break;
    case MQL_REPLY_ARRAY:
        lua_createtable(L, (int)r->nelements, 0);
        for (i = 0; i < r->nelements; i++) {
            lmql_push_reply(L, &r->elements[i]);
            lua_rawseti(L, -2, (int)i + 1);
        }
        break;
    }
}

/* The fields push_event sets on ev's table, so the table is made at its
 * size: most events are a Redis reply or an ack (kind, op, ok and one more),
 * thousands a second under the exactly-once policy, and a table made for
 * eight fields took twice the memory those four need. */
static int event_fields(const mql_event *ev) {
    int n = 3;   /* kind, op, ok; a lease event's kind, lease_id, state, renewals */
    if (ev->kind == MQL_EV_LEASE) return 4;
    if (ev->kind != MQL_EV_OP) return 3;
    if (!ev->result.ok) n += 2;
    if (ev->msgs || ev->nmsgs) n += 2;
    if (ev->message_id) n += ev->transaction_id ? 4 : 3;
    if (ev->reply) n += ev->reply->type == MQL_REPLY_ERROR ? 2 : 1;
    if (ev->entries) n += 1;
    return n;
}

static void push_event(lua_State *L, const mql_event *ev) {
    size_t i;
    lua_createtable(L, 0, event_fields(ev));
    if (ev->kind == MQL_EV_LOCK_LOST) {
        lmql_set_str(L, "kind", "lock_lost");
        lmql_set_int(L, "keepalive", (lua_Integer)ev->keepalive_id);
        return;
    }
    if (ev->kind == MQL_EV_LEASE) {
        lmql_set_str(L, "kind", "lease");
        lmql_set_int(L, "lease_id", (lua_Integer)ev->lease_id);
        lmql_set_str(L, "state", mql_lease_state_name((mql_lease_state)ev->lease_state));
        lmql_set_int(L, "renewals", ev->lease_renewals);
        return;
    }
    if (ev->kind == MQL_EV_ORPHAN) {
        /* { kind = "orphan", transaction_id, message, shape }: the proxy asks
         * about a half message (shape as for a received message) */
        lmql_set_str(L, "kind", "orphan");
        lmql_set_str(L, "transaction_id", ev->transaction_id);
        push_message(L, &ev->msgs[0]);
        lua_setfield(L, -2, "message");
        push_new_shape(L, &ev->msgs[0]);
        lua_setfield(L, -2, "shape");
        return;
    }
    lmql_set_str(L, "kind", "op");
    lmql_set_int(L, "op", (lua_Integer)ev->op);
    lmql_push_result_fields(L, &ev->result);
    if (ev->msgs || ev->nmsgs) {
        /* messages[i] and shapes[i]: messages of one shape share its table */
        lua_createtable(L, (int)ev->nmsgs, 0);
        lua_createtable(L, (int)ev->nmsgs, 0);
        for (i = 0; i < ev->nmsgs; i++) {
            push_shape(L, ev->msgs, i);
            lua_rawseti(L, -2, (int)i + 1);
            lmql_message_push(L, &ev->msgs[i]);
            lua_rawseti(L, -3, (int)i + 1);
        }
        lua_setfield(L, -3, "shapes");
        lua_setfield(L, -2, "messages");
    }
    if (ev->message_id) {
        lmql_set_str(L, "message_id", ev->message_id);
        lmql_set_int(L, "offset", (lua_Integer)ev->offset);
        lmql_set_str(L, "recall_handle", ev->recall_handle);
        if (ev->transaction_id) lmql_set_str(L, "transaction_id", ev->transaction_id);
    }
    if (ev->reply) {
        lmql_push_reply(L, ev->reply);
        lua_setfield(L, -2, "reply");
        if (ev->reply->type == MQL_REPLY_ERROR) lmql_set_str(L, "reply_error", ev->reply->str);
    }
    if (ev->entries) {
        lua_createtable(L, (int)ev->nentries, 0);
        for (i = 0; i < ev->nentries; i++) {
            lua_createtable(L, 0, 3);
            lmql_push_result_fields(L, &ev->entries[i]);
            lua_rawseti(L, -2, (int)i + 1);
        }
        lua_setfield(L, -2, "entries");
    }
}

/* push_event in a protected call: (event) -> its table. */
static int push_one(lua_State *L) {
    push_event(L, lua_touserdata(L, 1));
    return 1;
}

/* What the waiter of an op gets when its event could not be made: (event,
 * message) -> { kind = "op", op, ok = false, code = "INTERNAL", err }. */
static int push_stand_in(lua_State *L) {
    const mql_event *ev = lua_touserdata(L, 1);
    lua_createtable(L, 0, 5);
    lmql_set_str(L, "kind", "op");
    lmql_set_int(L, "op", (lua_Integer)ev->op);
    lua_pushboolean(L, 0);
    lua_setfield(L, -2, "ok");
    lmql_set_str(L, "code", "INTERNAL");
    lua_pushfstring(L, "mqlease: a result could not be made into Lua values (%s)",
                    lua_isstring(L, 2) ? lua_tostring(L, 2) : "an error object");
    lua_setfield(L, -2, "err");
    return 1;
}

/* The table of one event into slot n of the array at index t: 1 if it is
 * there, 0 if its stand-in is, -1 if neither could be made. */
static int add_event(lua_State *L, int t, int n, const mql_event *ev) {
    lua_pushcfunction(L, push_one);
    lua_pushlightuserdata(L, (void *)ev);
    if (lua_pcall(L, 1, 1, 0) == 0) {
        lua_rawseti(L, t, n);   /* the slot exists: the array was made that long */
        return 1;
    }
    if (ev->kind == MQL_EV_OP) {
        /* its waiter must not wait for ever: an error in its place */
        lua_pushcfunction(L, push_stand_in);
        lua_insert(L, -2);
        lua_pushlightuserdata(L, (void *)ev);
        lua_insert(L, -2);
        if (lua_pcall(L, 2, 1, 0) == 0) {
            lua_rawseti(L, t, n);
            return 0;
        }
    }
    lua_pop(L, 1);   /* the error */
    return -1;
}

void lmql_free_events(mql_event *list) {
    mql_event *next;
    for (; list; list = next) {
        next = list->next;
        mql_event_free(list);
    }
}

static int push_array(lua_State *L) {
    lua_createtable(L, (int)lua_tointeger(L, 1), 0);
    return 1;
}

/* Pushes an array of event tables (possibly empty) and frees the list. Each
 * event is made on its own, in a protected call: one that cannot be (Lua out
 * of memory for its messages) is handed to hooks->dropped and skipped -- an
 * op's waiter gets an INTERNAL error in its place -- and the others are
 * delivered, so no event can block the ones behind it for good. Only if not
 * even the array can be made does the whole list go back to its queue
 * (hooks->requeue) and the error is raised again. */
void lmql_push_events(lua_State *L, mql_event *list, const lmql_event_hooks *hooks,
                      void *owner) {
    mql_event *ev, *next;
    int n = 0, slot = 0, t;
    for (ev = list; ev; ev = ev->next) n++;
    lua_pushcfunction(L, push_array);
    lua_pushinteger(L, n);
    if (lua_pcall(L, 1, 1, 0) != 0) {
        if (hooks->requeue) hooks->requeue(owner, list);
        else lmql_free_events(list);
        lua_error(L);
    }
    t = lua_gettop(L);
    for (ev = list; ev; ev = next) {
        int added = lua_checkstack(L, 4) ? add_event(L, t, slot + 1, ev) : -1;
        next = ev->next;
        if (added >= 0) slot++;
        if (added <= 0 && hooks->dropped) hooks->dropped(owner, ev);
        mql_event_free(ev);
    }
}
