/* mql_call.h -- one gRPC call of the RocketMQ v2 API on the grpc C core.
 *
 * A call carries the RocketMQ request headers, the batches grpc needs for its
 * shape (unary, server-streaming, bidi) and the buffers those batches write
 * into. grpc completes each batch on the owner's completion queue with a tag
 * that points back into the call; mql_call_complete() advances it and calls
 * the owner's hooks: on_message for each streamed reply, on_done once, after
 * every batch has come back and the status is known. The owner then frees it.
 * What the call answered is read here too (mql_call_result, mql_call_reply):
 * the transport status first, then the status field of the RocketMQ reply.
 *
 * Batches of one call are only started under the owner's lock, which is the
 * serialisation grpc asks for.
 */
#ifndef MQL_CALL_H
#define MQL_CALL_H

#include <grpc/grpc.h>
#include <protobuf-c/protobuf-c.h>
#include <stdint.h>

#include "mql.h"
#include "mql_codec.h"

/* Who the calls are from: the headers every RocketMQ request carries. */
/* The header values every call of a client sends, made once and shared by
 * reference (each call refs the slices it sends): before, each call copied
 * seven strings, formatted the date and drew its request id from getrandom,
 * a system call per renewal. The date and the signature over it change once
 * a second; a request id is a random base drawn once plus a counter.
 * Guarded by the client's mutex, like the calls that use it. */
typedef struct mql_header_cache {
    int ready;
    grpc_slice client_id, language, protocol, version, namespace_, token;
    int64_t date_sec;                  /* the second date and authorization are for */
    grpc_slice date, authorization;    /* authorization: empty without credentials */
    unsigned char request_base[16];
    uint64_t request_seq;
} mql_header_cache;

typedef struct mql_identity {
    const char *client_id;
    const char *namespace_;      /* may be NULL or empty */
    const char *access_key;      /* NULL: no authorization header */
    const char *secret_key;
    const char *security_token;  /* may be NULL */
    mql_header_cache headers;    /* made on the first call; mql_call_identity_clear frees it */
} mql_identity;

/* Frees the header cache (the strings above belong to the caller). */
void mql_call_identity_clear(mql_identity *id);

/* A channel and the calls on it. grpc_channel_destroy fails every call still
 * in flight on the channel ("Channel Destroyed"), so a channel the session
 * replaces (a move to another proxy) must outlive the receives, acks and
 * renewals it carries: each call holds a reference, the owner one more, and
 * the last to let go destroys the grpc channel. Counted under the owner's
 * lock, like the calls. */
typedef struct mql_channel {
    grpc_channel *grpc;
    int refs;
} mql_channel;

/* Wraps a new grpc channel; the one reference is the caller's. */
mql_channel *mql_call_channel_new(grpc_channel *grpc);
/* Lets go of one reference; the last one destroys the channel. NULL: nothing. */
void mql_call_channel_unref(mql_channel *ch);

typedef struct mql_call mql_call;
typedef void (*mql_call_done_fn)(mql_call *c);
typedef void (*mql_call_message_fn)(mql_call *c, grpc_byte_buffer *reply);

typedef enum mql_tag_what {
    MQL_TAG_UNARY = 1,   /* the whole unary exchange */
    MQL_TAG_START,       /* stream: headers (+ request and half-close for server streaming) */
    MQL_TAG_RECV,        /* stream: one reply */
    MQL_TAG_SEND,        /* bidi stream: one request */
    MQL_TAG_STATUS       /* stream: final status */
} mql_tag_what;

typedef struct mql_tag {
    mql_call *call;
    mql_tag_what what;
} mql_tag;

struct mql_call {
    grpc_call *call;
    mql_channel *channel;        /* referenced until the call is freed */
    const char *method;
    size_t nmd, md_cap;
    grpc_metadata_array md_in;
    grpc_metadata_array trailing;
    grpc_byte_buffer *send_buf;
    grpc_byte_buffer *recv_buf;
    grpc_status_code status;
    grpc_slice details;
    int in_flight;               /* batches started, not yet completed */
    int status_seen;             /* the final status has arrived (or the start failed) */
    int streaming;
    int half_closed;
    mql_tag t_unary, t_start, t_recv, t_send, t_status;
    /* owner hooks and data */
    void *owner;
    const struct mql_call_ops *ops;   /* the owner's: what the call does when it ends */
    uint64_t op;
    void *ctx;
    mql_call_done_fn on_done;
    mql_call_message_fn on_message;
    mql_call *prev, *next;       /* owner's list of live calls */
    /* Our headers, sized at creation: a grpc_metadata is 96 bytes, and a
     * struct that stays under glibc's 1,032-byte tcache limit is allocated
     * and freed from the thread's cache instead of malloc's slow path (a
     * renewal makes and frees one call; ten fixed slots made it 1,248 B). */
    grpc_metadata md[];
};

/* timeout_ms < 0: no deadline (Telemetry lives as long as the client). */
mql_call *mql_call_new(mql_channel *ch, grpc_completion_queue *cq, const char *method,
                       int64_t timeout_ms, mql_identity *id);
/* Starts the call; 0 on success, -1 if grpc refused (then no hook will run). */
int mql_call_start_unary(mql_call *c, const ProtobufCMessage *req);
int mql_call_start_server_stream(mql_call *c, const ProtobufCMessage *req);
int mql_call_start_bidi(mql_call *c);
int mql_call_send(mql_call *c, const ProtobufCMessage *msg);   /* bidi only, one at a time */
void mql_call_half_close(mql_call *c);                          /* bidi only */
void mql_call_cancel(mql_call *c);
/* Advances the call for one completed batch; runs the hooks. */
void mql_call_complete(mql_tag *tag, int success);
/* Frees the call and lets go of its channel. */
void mql_call_free(mql_call *c);

/* A stable code and text for a transport failure ("UNAVAILABLE", "TIMEOUT", ...). */
const char *mql_call_code_name(grpc_status_code s);

/* The result of a finished call: the transport status first, then the in-band one. */
void mql_call_result(mql_call *call, const mql_pb_status *st, mql_result *r);
/* A finished unary call's reply, unpacked, with its result in r (the transport
 * status, then the reply's own status field). NULL if there is no reply;
 * free it with mql_call_reply_free. */
void *mql_call_reply(mql_call *call, const ProtobufCMessageDescriptor *desc, mql_result *r);
void mql_call_reply_free(void *reply);

#endif /* MQL_CALL_H */
