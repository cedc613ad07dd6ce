/* mql_codec.h -- protobuf-c messages to and from grpc byte buffers.
 *
 * Pure translation, no I/O: packing a request into a buffer grpc can send,
 * unpacking a reply, and copying a wire Message into the host-facing
 * mql_message (which must outlive the protobuf tree it came from).
 */
#ifndef MQL_CODEC_H
#define MQL_CODEC_H

#include <grpc/byte_buffer.h>
#include <protobuf-c/protobuf-c.h>

#include "apache/rocketmq/v2/service.pb-c.h"
#include "mql_events.h"

typedef Apache__Rocketmq__V2__Resource mql_pb_resource;
typedef Apache__Rocketmq__V2__Status mql_pb_status;

/* Returns a new byte buffer holding the packed message (caller destroys it). */
grpc_byte_buffer *mql_pack(const ProtobufCMessage *msg);
/* The bytes of a received buffer as one slice (caller unrefs it); -1 if there is none. */
int mql_read_all(grpc_byte_buffer *bb, grpc_slice *out);
/* Unpacks a reply; NULL if the buffer is NULL or not a valid message, or if
 * unpacking it would allocate more than MQL_UNPACK_BYTES_MAX in all (an
 * honest reply, a Route of thousands of queues included, needs a few MiB).
 * Free it with protobuf_c_message_free_unpacked(msg, NULL). */
#define MQL_UNPACK_BYTES_MAX ((size_t)64 << 20)
ProtobufCMessage *mql_unpack(const ProtobufCMessageDescriptor *desc, grpc_byte_buffer *bb);
/* The same from bytes in memory. */
ProtobufCMessage *mql_unpack_bytes(const ProtobufCMessageDescriptor *desc, const uint8_t *data, size_t len);

/* Copies a delivered message into out (all strings duplicated, the body as
 * it came over the wire: see mql_inbound.h for the checked path). */
void mql_message_from_pb(mql_message *out, const Apache__Rocketmq__V2__Message *in);
/* The same without the body (out->body stays NULL). */
void mql_message_fields_from_pb(mql_message *out, const Apache__Rocketmq__V2__Message *in);

/* Turns an in-band Status into a result; OK when the code is OK. A missing
 * status is a protocol error: the proxy always sends one. */
void mql_result_from_status(mql_result *r, const mql_pb_status *st, const char *what);

/* The receipt handle a ChangeInvisibleDuration answered, made consistent with
 * the checkpoint the broker wrote; returns a new string (see mql_codec.c). */
char *mql_handle_after_change(const char *handle);
/* Whether got, the handle a change answered, names the message held names
 * (same broker, queue and offset). 1 when held lacks the proxy's layout
 * (there is nothing to compare); 0 when held has it and got lacks it. */
int mql_handle_names_message(const char *got, const char *held);
/* The broker's pop time (epoch ms, its own clock) a receipt handle carries in
 * its second field; 1 and *pop_ms set, or 0 if the handle does not have the
 * proxy's layout (a dev broker's, say). */
int mql_handle_pop_ms(const char *handle, int64_t *pop_ms);
/* How long the broker hides the message from its pop (ms), the handle's third
 * field (org.apache.rocketmq.common.consumer.ReceiptHandle: invisibleTime);
 * 1 and *invisible_ms set, or 0 as for mql_handle_pop_ms. */
int mql_handle_invisible_ms(const char *handle, int64_t *invisible_ms);

/* Request fields from plain values: a resource (namespace may be NULL), a
 * duration or a timestamp from milliseconds. */
void mql_set_resource(mql_pb_resource *r, const char *ns, const char *name);
void mql_set_duration(Google__Protobuf__Duration *d, int64_t ms);
void mql_set_timestamp(Google__Protobuf__Timestamp *t, int64_t epoch_ms);

#endif /* MQL_CODEC_H */
