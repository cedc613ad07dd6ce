/* dv_call.h -- what the dev broker's server loop (dv_server.c), its call
 * plumbing (dv_call.c) and its request handlers (dv_handlers.c) share; not
 * part of the broker's interface (that is dv_server.h).
 *
 * A call is a small state machine: request read -> handled -> replies sent
 * one by one -> status -> (client closed) -> freed. A call with no grpc call
 * (a "detached" one, dv_server_handle) runs the same handlers and sends
 * nothing: the fuzz target's way in.
 */
#ifndef DV_CALL_H
#define DV_CALL_H

#include <grpc/grpc.h>
#include <pthread.h>
#include <stdint.h>

#include "apache/rocketmq/v2/service.pb-c.h"
#include "dv_server.h"
#include "dv_store.h"
#include "dv_half.h"
#include "dv_wire.h"

#define DV_MAX_BODY (4 * 1024 * 1024)   /* the proxy's maxMessageSize */

typedef enum method {
    M_UNKNOWN = 0, M_ROUTE, M_HEARTBEAT, M_SEND, M_RECEIVE, M_ACK, M_TELEMETRY, M_TERMINATE, M_CHANGE,
    M_END_TRANSACTION
} method;

typedef struct dv_call dv_call;
typedef struct tag { dv_call *c; int what; } tag;
enum { T_NEW = 1, T_RECV, T_SEND, T_STATUS, T_CLOSE };

struct dv_call {
    dv_server *srv;
    grpc_call *call;
    grpc_call_details details;
    grpc_metadata_array md;
    method m;
    char client_id[192];
    grpc_byte_buffer *req;
    grpc_byte_buffer **out;     /* replies waiting to be sent, in order */
    size_t nout, iout, capout;
    int md_sent, sending, finishing, status_sent, closed, cancelled, in_flight;
    int listed;                 /* on the waiting list: a call is listed at most once */
    grpc_status_code status;
    int64_t poll_until;         /* receive: wall ms when the long poll ends */
    int64_t answer_at;          /* delayed answer: wall ms */
    Apache__Rocketmq__V2__ReceiveMessageRequest *rx;
    tag t_new, t_recv, t_send, t_status, t_close;
    dv_call *next;              /* on the waiting list (long poll, delay, pause) */
    dv_call *next_stream;       /* on the list of Telemetry streams */
    int streamed;               /* on that list */
    char **pub_topics;          /* Telemetry of a producer: the topics its settings announced */
    size_t npub;
    int producer_listed;        /* on srv->producers: transaction checks may go to it */
};

typedef struct client_reg { char *id; int consumer; } client_reg;

struct dv_server {
    grpc_server *server;
    grpc_completion_queue *cq;
    dv_store store;
    dv_halves halves;           /* transactions not yet ended (dv_half.h) */
    dv_call **producers;        /* open Telemetry streams of producers */
    size_t nproducers, capproducers;
    pthread_mutex_t mu;         /* guards faults, topics added from outside, stats */
    dv_faults faults;
    client_reg *clients;
    size_t nclients;
    dv_call *waiting;
    dv_call *streams;           /* open Telemetry streams, for `reconnect` */
    uint64_t nonces;
    int port;
    unsigned int seed;
    uint64_t served, changes, acks, sent, received;
    uint64_t streams_dropped;   /* receive streams cancelled by `drop_streams` */
    dv_wire_stats wire;
};

typedef Apache__Rocketmq__V2__Status pb_status;

/* dv_call.c: replies, status, the waiting list, registered clients */
void dv_set_status(pb_status *st, int code, const char *msg);
int dv_chance(dv_server *s, double p);
void dv_reply(dv_call *c, const ProtobufCMessage *msg);
void dv_reply_raw(dv_call *c, const uint8_t *bytes, size_t len);
void dv_call_start(dv_call *c, grpc_op *ops, size_t n, tag *t);
void dv_pump(dv_call *c);
void dv_finish(dv_call *c, grpc_status_code status);
void dv_recv_next(dv_call *c);
void dv_call_free(dv_call *c);
void dv_wait_add(dv_server *s, dv_call *c);
void dv_wait_remove(dv_server *s, dv_call *c);
void dv_client_register(dv_server *s, const char *id, int consumer);
int dv_client_known(dv_server *s, const char *id);
void dv_client_forget(dv_server *s, const char *id);
/* A producer's Telemetry stream that announced topics: checks of their half
 * messages may go to it while it is open. */
void dv_producer_add(dv_server *s, dv_call *c);
/* The open producer stream that announced topic (the newest), or NULL. */
dv_call *dv_producer_for(dv_server *s, const char *topic);

/* dv_handlers.c: one request, answered or listed to be answered later */
void dv_dispatch(dv_server *s, dv_call *c);
void dv_on_telemetry(dv_server *s, dv_call *c);
/* Tries to answer a long poll; 1 when the call is answered. */
int dv_try_receive(dv_server *s, dv_call *c, int64_t now);
/* Asks about the half messages whose check is due (dv_half.h). */
void dv_check_transactions(dv_server *s, int64_t now);

#endif /* DV_CALL_H */
