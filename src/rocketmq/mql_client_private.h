/* mql_client_private.h -- what the files of one client share, and nobody else.
 *
 * A client is split along the life of a message, one file per stage:
 *
 *   mql_client.c    the hub: new/free, the thread, call plumbing; a finished
 *                   call runs the ops its stage gave it (mql_call_ops)
 *   mql_session.c   before any message: route, Telemetry settings, heartbeat,
 *                   terminate
 *   mql_receive.c   where a message enters: ReceiveMessage turns each message
 *                   into a lease in the table
 *   mql_renew.c     where its lease lives: timers, budget, renewal
 *   mql_release.c   where it leaves: ack, nack, let expire, nack-all at shutdown
 *   mql_change.c    ChangeInvisibleDuration, which a renewal and a nack both send
 *   mql_producer.c  the producer's one job: SendMessage
 *
 * (hiredis shares its async internals between files through async_private.h
 * in the same way.) Every function declared here runs with c->mu held unless
 * it says otherwise.
 */
#ifndef MQL_CLIENT_PRIVATE_H
#define MQL_CLIENT_PRIVATE_H

#include "mql_client.h"
#include "mql_call.h"
#include "mql_codec.h"
#include "mql_backoff.h"
#include "mql_auto.h"
#include "mql_pace.h"
#include "mql_anchor.h"

#define MQL_M_QUERY_ROUTE "/apache.rocketmq.v2.MessagingService/QueryRoute"
#define MQL_M_HEARTBEAT "/apache.rocketmq.v2.MessagingService/Heartbeat"
#define MQL_M_SEND "/apache.rocketmq.v2.MessagingService/SendMessage"
#define MQL_M_RECEIVE "/apache.rocketmq.v2.MessagingService/ReceiveMessage"
#define MQL_M_ACK "/apache.rocketmq.v2.MessagingService/AckMessage"
#define MQL_M_TELEMETRY "/apache.rocketmq.v2.MessagingService/Telemetry"
#define MQL_M_TERMINATE "/apache.rocketmq.v2.MessagingService/NotifyClientTermination"
#define MQL_M_CHANGE "/apache.rocketmq.v2.MessagingService/ChangeInvisibleDuration"
#define MQL_M_DLQ "/apache.rocketmq.v2.MessagingService/ForwardMessageToDeadLetterQueue"

/* What a call does when it ends, given by the stage that starts it (as
 * hiredis passes a redisCallbackFn with each command): on_message for each
 * reply of a stream (NULL for unary calls), on_done once with the status
 * known. The hub unlinks the call before on_done and frees it after. Each
 * stage keeps its ops in a static const struct of its own file. */
typedef struct mql_call_ops {
    void (*on_message)(mql_client *c, mql_call *call, grpc_byte_buffer *reply);
    void (*on_done)(mql_client *c, mql_call *call);
} mql_call_ops;

/* A release the host asked for (an ack of one or more leases, or a nack of
 * one): the leases and the op to answer, with one result per lease. */
typedef struct mql_release mql_release;
struct mql_release {
    uint64_t op;
    int is_ack;
    int dead_letter;            /* ForwardMessageToDeadLetterQueue instead of a nack */
    int silent;                 /* started by the core itself: no host op waits for it */
    char reason[32];            /* dead letter: counted under this word */
    int64_t delay_ms;           /* nack */
    uint64_t *ids;
    size_t n;
    mql_result *entries;        /* one result per lease, filled as they settle */
    int *settled;
    int held;                   /* waited for the session's reconnect (counted once) */
    int64_t held_at;            /* since when (it waits one request timeout at most) */
    int no_hold;                /* never waits for a reconnect (nack_all: close, the watcher) */
    mql_release *next;          /* on c->deferred while renewals are in flight or held */
};

/* What only a consumer has: its subscription, its leases and how they renew
 * and leave. A producer's part is the few fields it mints message ids and
 * announces topics with. Both live in every client; the type says which one
 * is in use. */
typedef struct mql_consumer_part {
    char *group, *topic, *filter;
    int filter_sql;
    char *broker_name;          /* the route's broker: receives name it */
    int64_t invisible_ms;       /* what the next receive and renewal ask for */
    int64_t renew_every_ms;     /* follows invisible_ms unless configured */
    int renew_every_fixed;      /* renew_every was configured */
    int invisible_auto;         /* invisible_ms follows the handler times */
    mql_auto auto_;             /* (mql_auto.h) */
    int renew, max_renewals;
    int64_t max_lease_ms, release_delay_ms;
    mql_budget_action on_budget;
    int on_corrupt_dlq;
    int64_t corrupt_delay_ms;
    size_t max_body;
    mql_lease_table leases;
    mql_pace pace;              /* renewal pacing (mql_renew.c) */
    mql_anchor anchor;          /* the broker's clock against ours (mql_receive.c) */
    int renew_inflight;         /* renewals in flight */
    mql_release *deferred;      /* releases waiting for a renewal's reply, or held
                                   while the session reconnects (mql_release.c) */
    int nacked_all;             /* nack_all ran (close, shutdown): late messages go back */
    int64_t nacked_all_delay_ms;
    int fifo;                   /* from the server's Settings (mql_session.c) */
    mql_retry_policy retry;     /* from the server's Settings (mql_session.c) */
} mql_consumer_part;

typedef struct mql_producer_part {
    char **topics;              /* announced in the Telemetry settings */
    size_t ntopics;
    uint8_t id_node[6];         /* message-id node bytes (random, in place of a MAC) */
    uint32_t id_seq;
} mql_producer_part;

struct mql_client {
    mql_client_type type;
    char *endpoint_list;        /* as configured: "host:port;host:port" */
    size_t nendpoints, endpoint_at;
    char *endpoint, *host;      /* the one in use: endpoint_at's "host:port" */
    int port;
    char *namespace_, *access_key, *secret_key, *security_token;
    int tls, tls_insecure;
    char *tls_ca_pem, *tls_cert_pem, *tls_key_pem, *tls_server_name;   /* NULL: not given */
    int64_t request_timeout_ms;
    char client_id[192];
    char hostname[128];
    mql_identity id;
    uint64_t rand_state;

    pthread_mutex_t mu;
    pthread_t thread;
    int thread_started;
    grpc_completion_queue *cq;
    grpc_channel *access;       /* the configured endpoint: routes */
    grpc_channel *broker;       /* the route's broker endpoint: everything else */
    mql_events events;
    mql_metrics metrics;
    mql_client_state state;
    uint64_t start_op;
    uint64_t next_op;
    mql_call *calls;            /* every live call, so close can cancel them */
    mql_call *telemetry;
    int64_t telemetry_retry_at; /* 0: not scheduled */
    int reconnecting;           /* a started session lost its Telemetry stream */
    int64_t settings_due_at;    /* 0: none; a reconnect's stream must bring our settings back by then */
    int telemetry_given_up;     /* we cancelled the stream (counted as TIMEOUT): its end is not a new failure */
    mql_backoff reconnect;      /* waits between reconnection attempts */
    int64_t heartbeat_at;       /* 0: not scheduled */
    int stopping;               /* set once by close: no call starts from then on */
    int stopped;                /* the thread is joined and grpc is torn down */
    int refs;                   /* the host's one, plus one per signal watcher */

    mql_consumer_part consumer;
    mql_producer_part producer;
};

/* ------------------------------------------------------- mql_client.c */

uint64_t mql_client_random(mql_client *c);
/* Events for the host: an op's result, an op refused at once, a lease's new state. */
void mql_post_op(mql_client *c, uint64_t op, const mql_result *r);
uint64_t mql_post_refusal(mql_client *c, const char *code, const char *msg);
void mql_post_lease(mql_client *c, const mql_lease *l, mql_lease_state state);
/* The guard of every operation the host starts: 1 (and *op set to a refusal)
 * when the client is stopping or not ready, or is not of the given type. */
int mql_client_refuses(mql_client *c, mql_client_type type, const char *what, uint64_t *op);

/* A call linked into c->calls; ops say what it does when it ends. */
mql_call *mql_client_call(mql_client *c, grpc_channel *ch, const char *method,
                          int64_t timeout_ms, const mql_call_ops *ops, uint64_t op, void *ctx);
void mql_client_unlink(mql_client *c, mql_call *call);
/* Starts a unary call; on a refused start the call is dropped and -1 returned. */
int mql_client_unary(mql_client *c, mql_call *call, const ProtobufCMessage *req);

/* ------------------------------------------------------ mql_session.c */

/* Checks every entry of c->endpoint_list and takes the first; -1 and err if
 * one is not host:port. Runs before the thread, without c->mu. */
int mql_session_endpoints_init(mql_client *c, char *err, size_t errlen);
void mql_session_begin(mql_client *c);
/* The arguments of every channel a client opens (at most
 * MQL_CHANNEL_ARGS_MAX), and their number. */
#define MQL_CHANNEL_ARGS_MAX 6
size_t mql_session_channel_args(const mql_client *c, grpc_arg args[MQL_CHANNEL_ARGS_MAX]);
/* A channel to target with the client's channel arguments and credentials
 * (plaintext, or TLS as configured). */
grpc_channel *mql_session_channel_new(const mql_client *c, const char *target);
/* Runs the session's due timers (heartbeat, Telemetry re-open); returns the
 * earlier of wake and its next timer. */
int64_t mql_session_timers(mql_client *c, int64_t now, int64_t wake);

/* ------------------------------------------------------- mql_change.c */

/* What a renewal retried after UNAVAILABLE needs before the deadline on top of
 * K x p99: the session is moving to a live proxy, so the retry goes out on a
 * new channel and pays for its connection (TCP, HTTP/2, TLS) first. */
#define MQL_RECONNECT_NEEDS_MS 1000

/* ChangeInvisibleDuration with the lease's newest handle, ending in ops (a
 * renewal's, a nack's); op and ctx are the call's. -1 if it did not start. */
int mql_change_start(mql_client *c, mql_lease *l, int64_t duration_ms,
                     const mql_call_ops *ops, uint64_t op, void *ctx);
/* What a call on the session's new channel needs before a lease's deadline:
 * K x the observed p99 plus MQL_RECONNECT_NEEDS_MS, at most the request
 * timeout. A retried renewal after UNAVAILABLE and a release held for the
 * reconnect (mql_release.c) go out no later than that. */
int64_t mql_change_new_channel_needs_ms(const mql_client *c);

/* ------------------------------------------------------ mql_release.c */

/* The lease leaves the table in its final state; the host is told. */
void mql_release_end(mql_client *c, mql_lease *l, mql_lease_state final);
/* A lease that ended on its own fails every deferred release that waits for it. */
void mql_release_fail_lease(mql_client *c, uint64_t lease_id, const char *code,
                            const char *msg);
/* Sends the deferred releases whose renewals have come back and, once the
 * session has our settings again, those held for its reconnect (or any whose
 * lease can wait no longer); fails held ones CLOSED once stopping. */
void mql_release_run_deferred(mql_client *c);
void mql_release_free(mql_release *rel);
/* A lease the host never sees (a corrupted message): dead-letter or nack it
 * from the core; if that fails it is left to expire, never renewed. */
void mql_release_unseen(mql_client *c, mql_lease *l, int dead_letter, int64_t delay_ms,
                        const char *reason);

/* -------------------------------------------------------- mql_renew.c */

/* When a lease just received renews first: paced, so leases received
 * together do not renew together (see mql_pace.h). */
int64_t mql_renew_next_at(mql_client *c, const mql_lease *l);
/* Runs every due lease timer; returns the earlier of wake and the next one. */
int64_t mql_renew_timers(mql_client *c, int64_t now, int64_t wake);

#endif /* MQL_CLIENT_PRIVATE_H */
