/* mql_inbound.h -- what the server streams to us, judged before anyone uses it.
 *
 * One ReceiveMessage response frame becomes exactly one of: the in-band status,
 * a good message (identity present, digest verified, body inflated), a
 * *corrupted* message (identity fine, body or a text field failed: it still holds a lease and
 * must be given back or dead-lettered, but never reaches a handler), or a
 * *malformed* frame (undecodable, more fields than MQL_FRAME_FIELDS_MAX, or
 * no message id / receipt handle / topic, or an id longer than
 * MQL_MESSAGE_ID_MAX: nothing is done with it but count it, and the broker
 * redelivers it after its invisible duration). A Telemetry
 * frame becomes the settings the server pushed, with every duration saturated.
 *
 * Pure functions over bytes, so the fuzz targets drive exactly what the
 * client runs (spec/fuzz/mql_receive_fuzz.c, mql_telemetry_fuzz.c).
 */
#ifndef MQL_INBOUND_H
#define MQL_INBOUND_H

#include <stddef.h>
#include <stdint.h>

#include "mql_backoff.h"
#include "mql_events.h"

typedef enum mql_frame_kind {
    MQL_FRAME_STATUS = 1,   /* status holds the in-band Status as a result */
    MQL_FRAME_MESSAGE,      /* msg is a good message */
    MQL_FRAME_CORRUPTED,    /* msg has id, topic, handle but no body; reason says why */
    MQL_FRAME_MALFORMED,    /* reason says why; msg holds whatever could be read */
    MQL_FRAME_OTHER         /* delivery_timestamp, or content this client does not use */
} mql_frame_kind;

typedef struct mql_frame {
    mql_frame_kind kind;
    const char *reason;     /* static text: "undecodable", "too_many_fields" (more than
                             * MQL_FRAME_FIELDS_MAX: never unpacked), "repeated_singular_field"
                             * (a singular message field sent twice: never unpacked),
                             * "no_message_id", "message_id_too_long",
                             * "no_receipt_handle", "no_topic"; "nul_in_text" (a NUL inside a
                             * string field, which protobuf-c would cut there); or an
                             * mql_body_status_name() */
    mql_result status;
    mql_message msg;
} mql_frame;

/* Judges one ReceiveMessageResponse. max_body bounds the body after inflation. */
void mql_frame_decode(mql_frame *f, const uint8_t *data, size_t len, size_t max_body);
void mql_frame_clear(mql_frame *f);

/* What a Telemetry frame from the server says. Durations in ms (0 when
 * absent, saturated, never negative). */
typedef struct mql_telemetry_reply {
    int decoded;                /* 0: the frame did not decode, or has more fields than
                                 * MQL_FRAME_FIELDS_MAX (then never unpacked) */
    int has_status;
    mql_result status;          /* when has_status */
    int has_settings;
    int max_attempts;           /* backoff_policy.max_attempts */
    int64_t backoff_initial_ms; /* exponential backoff, or the first customized step */
    int64_t backoff_max_ms;
    mql_retry_policy retry;     /* the whole backoff_policy (max_attempts 0 when absent) */
    int64_t request_timeout_ms;
    int64_t long_polling_ms;    /* subscription */
    int receive_batch_size;
    int fifo;
    int64_t max_body_size;      /* publishing; 0 when absent or negative */
    int reconnect_endpoints;    /* a ReconnectEndpointsCommand (apis 2.1.x) */
    /* RecoverOrphanedTransactionCommand: has_orphan with the half message (its
     * body verified and inflated) and the transaction id, both owned by out
     * (mql_telemetry_clear); orphan_bad (a static reason) when the command
     * came without a message id, topic or transaction id, with a NUL inside
     * a text field ("nul_in_text"), or a bad body */
    int has_orphan;
    mql_message orphan;
    char *orphan_transaction_id;
    const char *orphan_bad;
} mql_telemetry_reply;

/* max_body bounds an orphan's body after inflation. */
void mql_telemetry_decode(mql_telemetry_reply *out, const uint8_t *data, size_t len, size_t max_body);
void mql_telemetry_clear(mql_telemetry_reply *out);

#endif /* MQL_INBOUND_H */
