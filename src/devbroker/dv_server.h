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
#include <stdint.h>

typedef struct dv_faults {
    double fail_change;        /* share of ChangeInvisibleDuration answered INTERNAL_SERVER_ERROR */
    double fail_ack;           /* share of ack entries answered INTERNAL_SERVER_ERROR */
    int64_t delay_change_ms;   /* every ChangeInvisibleDuration answers this much later */
    int max_renewals;          /* < 0: no cap; else changes per delivery before they fail */
    int paused;                /* hold every answer until unpaused */
    int drop_streams;          /* one-shot: cancel the receive streams in flight */
    int64_t min_invisible_ms;  /* receive's lower bound (the proxy's is 10 s) */
    double time_scale;         /* invisible durations last this factor of what is asked (1 = real) */
} dv_faults;

typedef struct dv_server dv_server;

dv_server *dv_server_new(const char *listen, int *port);
/* Topics must exist before clients use them, as with the real proxy. */
void dv_server_add_topic(dv_server *s, const char *name);
/* Faults are read by the server thread under this lock. */
pthread_mutex_t *dv_server_lock(dv_server *s);
dv_faults *dv_server_faults(dv_server *s);
/* A line of counters for the control interface (caller holds the lock). */
void dv_server_stats(dv_server *s, char *buf, size_t len);
/* Runs until dv_server_stop is called (from a signal-safe flag). */
void dv_server_run(dv_server *s, volatile int *stop);
void dv_server_free(dv_server *s);

#endif /* DV_SERVER_H */
