/* dv_server.h -- the dev broker's gRPC server (grpc core, one thread).
 *
 * Serves the RocketMQ v2 calls a SimpleConsumer and a producer use, over the
 * store in dv_store.h, with faults that a test can switch at run time through
 * dv_control.c: fail or delay a share of renewals or acks, cap renewals per
 * message, pause every answer (a partition), drop receive streams.
 */
#ifndef DV_SERVER_H
#define DV_SERVER_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "dv_command.h"


typedef struct dv_server dv_server;

dv_server *dv_server_new(const char *listen, int *port);
/* Topics must exist before clients use them, as with the real proxy. */
void dv_server_add_topic(dv_server *s, const char *name);
/* The same, for a caller that holds dv_server_lock. */
void dv_server_add_topic_locked(dv_server *s, const char *name);
/* Stores a message carrying every field (dv_wire_full_message) on topic,
 * deliverable delay_ms from now; caller holds the lock. 0 and "id=<id>" in
 * msg, or -1 and the reason. */
int dv_server_publish_locked(dv_server *s, const char *topic, int64_t delay_ms, char *msg, size_t len);
/* Faults are read by the server thread under this lock. */
pthread_mutex_t *dv_server_lock(dv_server *s);
dv_faults *dv_server_faults(dv_server *s);
/* A line of counters for the control interface (caller holds the lock). */
void dv_server_stats(dv_server *s, char *buf, size_t len);
/* Runs until dv_server_stop is called (from a signal-safe flag). */
void dv_server_run(dv_server *s, volatile int *stop);
void dv_server_free(dv_server *s);

/* Runs one request (rpc as "SendMessage", "Telemetry", ...) as if it had
 * arrived on a call from client_id, without a transport: what it answers is
 * built and dropped, a long poll ends at once. For the fuzz target; the
 * server loop must not be running. */
void dv_server_handle(dv_server *s, const char *rpc, const char *client_id, const uint8_t *req,
                      size_t len);
/* Forgets every topic, message, client and setting (the fuzz target's reset). */
void dv_server_reset(dv_server *s);

#endif /* DV_SERVER_H */
