/* mql_base.h -- the floor every stage of a client stands on, and nobody else.
 *
 * A client is split along the life of a message, one file per stage, each
 * with a header of its own that declares only that file's functions:
 *
 *   mql_base.c      the floor: the client struct (here), its list of calls
 *                   and the ops a finished call runs (mql_call_ops), the
 *                   events it posts to the host
 *   mql_session.c   before any message: route, Telemetry settings, heartbeat,
 *                   reconnecting, terminate
 *   mql_endpoint.c  how the proxy is reached: the endpoint list, the one in
 *                   use, its channels (plaintext or TLS)
 *   mql_receive.c   where a message enters: ReceiveMessage turns each message
 *                   into a lease in the table
 *   mql_renew.c     where its lease lives: timers, budget, renewal
 *   mql_release.c   where it leaves: ack, nack, dead letter, let expire,
 *                   nack-all at shutdown; how any lease leaves the table
 *   mql_ack.c       which entry of an AckMessage reply answers which lease
 *   mql_deferred.c  the releases that wait (renewals, a reconnect): a list,
 *                   and an index by lease
 *   mql_change.c    ChangeInvisibleDuration, which a renewal and a nack both send
 *   mql_lite.c      lite topics (RocketMQ 5.5): SyncLiteSubscription, and the lite
 *                   topic a lease's requests carry
 *   mql_producer.c  the producer's one job: SendMessage
 *   mql_transaction.c  a half message's end: EndTransaction
 *   mql_client.c    the public API (mql_client.h) above them all: new/free,
 *                   the thread and its timers, and each operation the host
 *                   starts, which takes c->mu and hands over to its stage
 *
 * Who calls whom, always downwards (mql_shutdown.c, the signal watcher, uses
 * only the public API, from above it):
 *
 *   mql_client.c   -> mql_session.c, mql_receive.c, mql_renew.c, mql_release.c, mql_lite.c,
 *                     mql_producer.c, mql_transaction.c (the host's operations,
 *                     the thread's timers)
 *   mql_session.c  -> mql_release.c, mql_renew.c (the releases and renewals
 *                     held for a reconnect go out once the new proxy has our
 *                     settings)
 *   mql_receive.c  -> mql_renew.c (a new lease's first renewal), mql_release.c
 *                     (what it may not take goes back at once), mql_session.c
 *                     (a proxy that answers again ends a reconnect's wait)
 *   mql_renew.c    -> mql_release.c (a lost lease ends, the releases deferred
 *                     behind a renewal go out), mql_change.c (a renewal)
 *   mql_release.c  -> mql_change.c (a nack), mql_ack.c (an ack's reply),
 *                     mql_deferred.c (the releases that wait, by lease)
 *   mql_session.c, mql_client.c -> mql_endpoint.c (the endpoint in use, a
 *                     move to the next, the channels to it)
 *   mql_session.c, mql_receive.c, mql_release.c, mql_change.c -> mql_lite.c
 *   mql_producer.c, mql_transaction.c, mql_change.c, mql_lite.c,
 *                     mql_endpoint.c, mql_ack.c, mql_deferred.c -> no other stage
 *   every stage    -> mql_base.c (a call started, its end dispatched to
 *                     its ops), which stands on mql_call.c; the stages use
 *                     mql_call.c directly too, for a reply decoded, a status
 *                     read, a stream of their own (receive, session)
 *
 * No stage calls mql_client.c: this header includes only the API's types
 * (mql_client_types.h), not mql_client.h, and spec/support/check-layers.sh
 * checks that no include of this folder comes back to the file it started
 * from. (hiredis shares its async internals between files through
 * async_private.h in the same way.)
 *
 * Every function declared here runs with c->mu held unless it says
 * otherwise; only mql_client.c takes it.
 */
#ifndef MQL_BASE_H
#define MQL_BASE_H

#include <pthread.h>
#include <stdint.h>

#include "mql.h"
#include "mql_client_types.h"
#include "mql_call.h"
#include "mql_codec.h"
#include "mql_backoff.h"
#include "mql_events.h"
#include "mql_lease.h"
#include "mql_metrics.h"
#include "mql_auto.h"
#include "mql_pace.h"
#include "mql_anchor.h"
#include "mql_deferred.h"

#define MQL_M_QUERY_ROUTE "/apache.rocketmq.v2.MessagingService/QueryRoute"
#define MQL_M_HEARTBEAT "/apache.rocketmq.v2.MessagingService/Heartbeat"
#define MQL_M_SEND "/apache.rocketmq.v2.MessagingService/SendMessage"
#define MQL_M_RECEIVE "/apache.rocketmq.v2.MessagingService/ReceiveMessage"
#define MQL_M_ACK "/apache.rocketmq.v2.MessagingService/AckMessage"
#define MQL_M_TELEMETRY "/apache.rocketmq.v2.MessagingService/Telemetry"
#define MQL_M_TERMINATE "/apache.rocketmq.v2.MessagingService/NotifyClientTermination"
#define MQL_M_CHANGE "/apache.rocketmq.v2.MessagingService/ChangeInvisibleDuration"
#define MQL_M_DLQ "/apache.rocketmq.v2.MessagingService/ForwardMessageToDeadLetterQueue"
#define MQL_M_RECALL "/apache.rocketmq.v2.MessagingService/RecallMessage"
#define MQL_M_SYNC_LITE "/apache.rocketmq.v2.MessagingService/SyncLiteSubscription"
#define MQL_M_END_TRANSACTION "/apache.rocketmq.v2.MessagingService/EndTransaction"

/* What a call does when it ends, given by the stage that starts it (as
 * hiredis passes a redisCallbackFn with each command): on_message for each
 * reply of a stream (NULL for unary calls), on_done once with the status
 * known. mql_base.c unlinks the call before on_done and frees it after. Each
 * stage keeps its ops in a static const struct of its own file. */
typedef struct mql_call_ops {
    void (*on_message)(mql_client *c, mql_call *call, grpc_byte_buffer *reply);
    void (*on_done)(mql_client *c, mql_call *call);
} mql_call_ops;

/* A release the host asked for (mql_release.h): the consumer keeps those
 * that wait, on its deferred list. */
typedef struct mql_release mql_release;

/* What only a consumer has: its subscription, its leases and how they renew
 * and leave. A producer's part is the few fields it mints message ids and
 * announces topics with. Both live in every client; the type says which one
 * is in use. */
/* A receive the host asked for while the renewals were behind (mql_receive.c). */
typedef struct mql_receive_wait {
    struct mql_receive_wait *next;
    uint64_t op;
    int batch;
    int64_t await_ms;
    size_t max_bytes;
    int64_t since_ms;           /* when the host asked */
} mql_receive_wait;

typedef struct mql_consumer_part {
    char *group, *topic, *filter;
    int filter_sql;
    int lite;                   /* a lite consumer (mql_lite.h) */
    char **lite_set;            /* the lite topics asked for, less failed syncs (mql_lite.c), */
    size_t nlite;               /* sent again to a proxy it reconnects to, and */
    int64_t lite_sync_every_ms; /* this often (the broker drops one left unsent) */
    int64_t lite_sync_at;       /* when next (0: not ready, or not lite) */
    /* The route's readable brokers (master queues, each name once, in route
     * order): the receives take turns naming them, as the Java client's
     * SubscriptionLoadBalancer does. The proxy pops from the broker a receive
     * names (ReceiveMessageActivity.ReceiveMessageQueueSelector), so a
     * consumer that named one broker never saw the others' messages. */
    char **brokers;
    size_t nbrokers, next_broker;
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
    int renew_behind;           /* the last timer pass found the renewals behind (mql_renew.c) */
    int64_t renew_queue_age_ms; /* its oldest due renewal's age */
    mql_receive_wait *waiting;  /* receives held for the renewals, oldest first (mql_receive.c) */
    uint64_t *renew_held;       /* leases whose renewal waits for the session's reconnect */
    size_t nrenew_held, renew_held_cap;   /* (mql_renew.c) */
    mql_deferred deferred;      /* releases waiting for a renewal's reply, or held
                                   while the session reconnects (mql_release.c) */
    int64_t held_need_ms;       /* the least new-channel need a held one was armed
                                   with since the last full run; 0: none (mql_release.c) */
    uint64_t deferred_looked_at;   /* releases the runs looked at: the C tests bound it */
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
    mql_channel *access;        /* the configured endpoint: routes */
    mql_channel *broker;        /* the route's broker endpoint: everything else */
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
    int reconnect_asked;        /* the server sent ReconnectEndpointsCommand: the stream's end reconnects at once */
    int64_t asked_at;           /* when the server last asked for that (0: never); asked again soon, the backoff first */
    mql_backoff reconnect;      /* waits between reconnection attempts */
    int64_t settled_at;         /* when the stream in use brought our settings back (0: not yet) */
    char reconnect_code[MQL_CODELEN];    /* how the last attempt (or the lost stream) failed */
    int64_t reconnect_call_ms;  /* 0: request_timeout; the deadline of an attempt's first call */
    int reconnect_route;        /* the next attempt asks for the route first */
    int64_t heartbeat_at;       /* 0: not scheduled */
    int64_t route_refresh_at;   /* a consumer's next QueryRoute for its brokers; 0: none */
    int stopping;               /* set once by close: no call starts from then on */
    int stopped;                /* the thread is joined and grpc is torn down */
    int refs;                   /* the host's one, plus one per signal watcher */

    mql_consumer_part consumer;
    mql_producer_part producer;
};

/* ---------------------------------------------------------- mql_base.c */

/* xorshift64* over c->rand_state: jitter only. */
uint64_t mql_base_random(mql_client *c);
/* Events for the host: an op's result, an op refused at once, a lease's new state. */
void mql_base_post_op(mql_client *c, uint64_t op, const mql_result *r);
uint64_t mql_base_post_refusal(mql_client *c, const char *code, const char *msg);
void mql_base_post_lease(mql_client *c, const mql_lease *l, mql_lease_state state);

/* A call linked into c->calls; ops say what it does when it ends: when it
 * does, the call is unlinked, its ops' on_done runs and the call is freed. */
mql_call *mql_base_call(mql_client *c, mql_channel *ch, const char *method,
                        int64_t timeout_ms, const mql_call_ops *ops, uint64_t op, void *ctx);
void mql_base_unlink(mql_client *c, mql_call *call);
/* Starts a unary call; on a refused start the call is dropped and -1 returned. */
int mql_base_unary(mql_client *c, mql_call *call, const ProtobufCMessage *req);

#endif /* MQL_BASE_H */
