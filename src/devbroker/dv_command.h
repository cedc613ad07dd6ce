/* dv_command.h -- the dev broker's settings and the control-port line parser.
 *
 * Pure functions, no sockets and no server: dv_control.c (the port), dv_main.c
 * (the flags) and the fuzz target spec/fuzz/dv_control_fuzz.c all go through
 * dv_command_parse, and every `set` through dv_faults_set, which checks range
 * and type before anything is stored (a bad value is an "error ..." answer).
 *
 *   topic NAME                 create a topic
 *   publish TOPIC [DELAY_MS]   store a message that carries every field (README)
 *   set KEY VALUE              a setting of dv_faults (see dv_faults_set)
 *   drop_streams               cancel the receive streams in flight, or the next one
 *   reconnect                  send ReconnectEndpointsCommand on every Telemetry stream
 *   stats                      one line of counters
 */
#ifndef DV_COMMAND_H
#define DV_COMMAND_H

#include <stddef.h>
#include <stdint.h>

typedef enum dv_digest { DV_DIGEST_MD5 = 0, DV_DIGEST_CRC32, DV_DIGEST_SHA1 } dv_digest;
typedef enum dv_malformed {
    DV_MALFORMED_ANY = 0,      /* rotate: empty id, empty handle, no topic */
    DV_MALFORMED_ID, DV_MALFORMED_HANDLE, DV_MALFORMED_TOPIC
} dv_malformed;

/* What a test can switch at run time. Shares are in [0, 1]. */
typedef struct dv_faults {
    double fail_change;        /* share of ChangeInvisibleDuration answered INTERNAL_SERVER_ERROR */
    double fail_ack;           /* share of ack entries answered INTERNAL_SERVER_ERROR */
    int64_t delay_change_ms;   /* every ChangeInvisibleDuration answers this much later */
    int64_t delay_send_ms;     /* every SendMessage answers this much later (stored at once) */
    int max_renewals;          /* < 0: no cap; else changes per delivery before they fail */
    int paused;                /* hold every answer until unpaused */
    int drop_streams;          /* armed until a tick cancels receive streams (at least one) */
    int reconnect_streams;     /* one-shot: ReconnectEndpointsCommand on every Telemetry stream */
    int64_t min_invisible_ms;  /* receive's lower bound (the proxy's is 10 s) */
    double time_scale;         /* invisible durations last this factor of what is asked (1 = real) */
    int64_t control_timeout_ms;/* a control client silent this long is dropped */
    /* wire cases: what a delivered message looks like */
    double gzip;               /* share of bodies sent zlib-compressed with body_encoding GZIP */
    int gzip_framing;          /* 0: zlib stream (what the proxy passes on); 1: gzip header */
    dv_digest digest;          /* the body_digest type sent (the proxy sends MD5) */
    double corrupt_digest;     /* share of messages whose body_digest does not match */
    double bomb;               /* share of bodies replaced by a GZIP body inflating past 64 MiB */
    double malformed;          /* share of messages sent without id, handle or topic */
    dv_malformed malformed_kind;
    double truncated_frame;    /* share of message frames cut so they do not decode */
    /* transactions (dv_half.h) */
    int64_t tx_check_ms;       /* a half message this old is asked about (transactionTimeOut) */
    int64_t tx_check_interval_ms; /* and again this often (transactionCheckInterval) */
    int tx_check_max;          /* checks before it is dropped (transactionCheckMax) */
    double drop_end_transaction; /* share of EndTransaction answered OK and lost, as a one-way
                                  * request the broker never got */
} dv_faults;

void dv_faults_init(dv_faults *f);

/* Sets one setting from its text value. 0, or -1 with a message in err. */
int dv_faults_set(dv_faults *f, const char *key, const char *value, char *err, size_t errlen);

typedef enum dv_cmd_kind {
    DV_CMD_TOPIC = 1, DV_CMD_PUBLISH, DV_CMD_SET, DV_CMD_DROP_STREAMS, DV_CMD_STATS, DV_CMD_RECONNECT
} dv_cmd_kind;

typedef struct dv_command {
    dv_cmd_kind kind;
    char name[128];            /* topic, or the setting's key */
    char value[128];           /* the setting's value */
    int64_t delay_ms;          /* publish: delivery time from now */
} dv_command;

/* Parses one line (no newline). 0, or -1 with a message in err. */
int dv_command_parse(const char *line, dv_command *cmd, char *err, size_t errlen);

#endif /* DV_COMMAND_H */
