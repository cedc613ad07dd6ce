/* mql_client_types.h -- the types of the client's public API, without its
 * functions.
 *
 * mql_client.h declares what the host calls and includes this; the stages of
 * a client (mql_base.h and the files on it) include only this, so none of
 * them sees the API above it, which calls down into them. Like mql_client.h
 * it pulls in no grpc header (spec/support/check-layers.sh).
 */
#ifndef MQL_CLIENT_TYPES_H
#define MQL_CLIENT_TYPES_H

#include <stddef.h>
#include <stdint.h>

#include "mql.h"
#include "mql_events.h"
#include "mql_lease.h"

typedef struct mql_client mql_client;

typedef enum mql_client_type {
    MQL_CONSUMER = 1,
    MQL_PRODUCER = 2
} mql_client_type;

typedef enum mql_budget_action {
    MQL_BUDGET_EXPIRE = 1,  /* stop renewing; the message comes back at the deadline */
    MQL_BUDGET_NACK         /* give it back at once */
} mql_budget_action;

/* Everything a client is made from. Validated by the host (lua/mqlease/config.lua);
 * the core copies the strings. Durations are milliseconds. */
typedef struct mql_config {
    mql_client_type type;
    const char *endpoint;        /* "host:port" of the access point */
    const char *namespace_;
    const char *access_key, *secret_key, *security_token;
    int64_t request_timeout_ms;  /* unary RPCs and the receive margin */
    /* TLS to the proxy (tls = 0: plaintext). PEM text, not paths: the host
     * reads the files, so a bad path fails where the option is checked. No CA:
     * the system's roots. insecure: no check of the proxy's certificate. */
    int tls, tls_insecure;
    const char *tls_ca_pem, *tls_cert_pem, *tls_key_pem;
    const char *tls_server_name; /* name the certificate must carry (default: the host) */
    /* consumer */
    const char *group;
    const char *topic;
    const char *filter;          /* tag expression, "*" for all */
    int filter_sql;              /* 1: filter is SQL92 */
    int lite;                    /* 1: topic is a LITE topic (RocketMQ 5.5, RIP-83): the client
                                    registers as LITE_PUSH_CONSUMER (mql_lite.h) */
    int64_t lite_sync_every_ms;  /* a lite consumer sends its whole lite set this often */
    int64_t invisible_ms;        /* invisible duration of each receive and renewal (auto: the start) */
    int invisible_auto;          /* 1: follow the handler times (mql_auto.h) */
    int64_t auto_min_ms, auto_max_ms;
    int auto_margin_pct;         /* 200: twice the p99 */
    int renew;                   /* 0: leases are never renewed (expire at the deadline) */
    int64_t renew_every_ms;      /* 0: invisible / 3 */
    int max_renewals;            /* < 0: unlimited */
    int64_t max_lease_ms;        /* total time a lease may be held; <= 0: unlimited */
    mql_budget_action on_budget;
    int64_t release_delay_ms;
    int on_corrupt_dlq;          /* a corrupted message: 1 forward to the DLQ, 0 nack it */
    int64_t corrupt_delay_ms;
    int64_t max_body;            /* bytes of a body after inflation; <= 0: MQL_MAX_BODY_DEFAULT */
    /* producer */
    const char **topics;
    size_t ntopics;
} mql_config;

typedef enum mql_client_state {
    MQL_CLIENT_STARTING = 1,
    MQL_CLIENT_READY,
    MQL_CLIENT_FAILED,
    MQL_CLIENT_CLOSING,
    MQL_CLIENT_RECONNECTING     /* metrics only: READY, but its proxy was lost */
} mql_client_state;

/* What a send may carry besides its body; zero-initialise and set what applies.
 * A message_group makes it a FIFO message, a delivery_ms a DELAY one (the two
 * exclude each other, as in the official clients' MessageBuilder). */
typedef struct mql_send_opts {
    const char *tag;
    const char **keys;
    size_t nkeys;
    const mql_kv *props;
    size_t nprops;
    const char *message_group;   /* NULL: none */
    int64_t delivery_ms;         /* wall clock, ms since the epoch; 0: deliver at once */
    const char *trace_context;   /* SystemProperties.trace_context (a W3C traceparent); NULL: none */
    int has_priority;            /* SystemProperties.priority (PRIORITY topics, RocketMQ 5.4+) */
    int32_t priority;            /* 0 and up, higher first */
    int transaction;             /* a half message (TRANSACTION type): invisible until ended */
    int64_t recovery_ms;         /* transaction: orphaned_transaction_recovery_duration; 0: the broker's */
    const char *lite_topic;      /* SystemProperties.lite_topic (a LITE topic, RocketMQ 5.5); NULL: none */
} mql_send_opts;
/* Snapshot of one lease (mql_client_lease_info). */
typedef struct mql_lease_info {
    mql_lease_state state;
    int64_t remaining_ms;
    int renewals;
    int64_t held_ms;
    int uncertain;            /* a renewal went unanswered: may come back once more */
} mql_lease_info;
#endif /* MQL_CLIENT_TYPES_H */
