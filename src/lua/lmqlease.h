/* lmqlease.h -- what the files of the Lua binding (mqlease.core) share.
 *
 * The binding is the only part of the project that includes lua.h, split by
 * what it binds: lmqlease.c (the module, consumers and producers), lmql_clock.c (waits, clocks),
 * lmql_push.c (core values -> Lua values), lmql_message.c (a received message), lmql_redis.c (core.redis),
 * lmql_signals.c (core.watch_signals) and lmql_exec.c (core.exec, core.spawn, core.reap). No C thread of the core ever calls
 * into these files: they run on the Lua thread only.
 */
#ifndef LMQLEASE_H
#define LMQLEASE_H

#include "mql_client.h"
#include "lmql_compat.h"

#define CLIENT_MT "mqlease.core.client"
#define WATCHER_MT "mqlease.core.signals"
#define REDIS_MT "mqlease.core.redis"

/* core.null: a Redis nil inside an array (a Lua nil would end the array). */
extern const char lmql_null;
#define LMQL_PUSH_NULL(L) lua_pushlightuserdata(L, (void *)&lmql_null)

typedef struct lclient {
    mql_client *c;
} lclient;

/* lmqlease.c: the client at index 1 (raises if closed), option readers. */
mql_client *lmql_check_client(lua_State *L);
const char *lmql_opt_string(lua_State *L, int t, const char *key);
/* The string on top of the stack, held by a table (raises on any other type). */
const char *lmql_table_string(lua_State *L, const char *what);
lua_Integer lmql_opt_int(lua_State *L, int t, const char *key, lua_Integer def);
int lmql_opt_bool(lua_State *L, int t, const char *key, int def);

/* lmql_push.c: fields of the table on top of the stack; event lists. */
void lmql_set_str(lua_State *L, const char *key, const char *v);
void lmql_set_int(lua_State *L, const char *key, lua_Integer v);
void lmql_set_num(lua_State *L, const char *key, lua_Number v);
void lmql_push_result_fields(lua_State *L, const mql_result *r);
/* A message's rare fields (keys, properties, message_group, trace_context,
 * delivery_timestamp, priority, lite_topic), where it has them. */
void lmql_set_rare_fields(lua_State *L, const mql_message *m);
/* A Redis reply as a Lua value (arrays as tables, nil inside arrays as core.null). */
void lmql_push_reply(lua_State *L, const mql_reply *r);
/* What lmql_push_events does with events it cannot deliver, for their owner:
 * requeue puts a whole list back (not even the array could be made; the
 * error is raised after), dropped is told of one event skipped (it counts it
 * and lets its leases go; the event is freed after). Either may be NULL. */
typedef struct lmql_event_hooks {
    void (*requeue)(void *owner, mql_event *list);
    void (*dropped)(void *owner, mql_event *ev);
} lmql_event_hooks;
/* Pushes an array of event tables and frees the list; an event that cannot be
 * made is skipped (an op's waiter gets an INTERNAL error in its place). Lua
 * code may run meanwhile (finalizers), so owner must outlive the push whatever
 * it does: a userdata on the caller's stack, not the core object it wraps. */
void lmql_push_events(lua_State *L, mql_event *list, const lmql_event_hooks *hooks,
                      void *owner);
/* Frees a list of events (linked by next). */
void lmql_free_events(mql_event *list);

/* lmql_message.c: a received message as a userdata (no metatable yet), and
 * the module's message_* functions, into the table on top of the stack. */
void lmql_message_push(lua_State *L, const mql_message *m);
void lmql_open_message(lua_State *L);

/* lmql_signals.c and lmql_redis.c: their metatables and constructors. */
void lmql_open_signals(lua_State *L);
int lmql_watch_signals(lua_State *L);
/* lmql_clock.c: core.wait, core.poll, core.now, core.wall, core.sleep. */
int lmql_wait(lua_State *L);
int lmql_poll(lua_State *L);
int lmql_now(lua_State *L);
int lmql_wall(lua_State *L);
int lmql_sleep(lua_State *L);
void lmql_open_redis(lua_State *L);
int lmql_redis(lua_State *L);
int lmql_eo_key(lua_State *L);
/* lmql_exec.c: core.exec(argv) -- execvp, or nil, message, code. */
int lmql_exec(lua_State *L);
/* lmql_exec.c: core.spawn(argv, out) -- a child that dies with this process;
 * core.reap(pid) -- collects a child's end without waiting. */
int lmql_spawn(lua_State *L);
int lmql_reap(lua_State *L);

#endif /* LMQLEASE_H */
