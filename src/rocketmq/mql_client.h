/* mql_client.h -- a RocketMQ v2 client session: consumer or producer.
 *
 * One client owns one completion queue and one thread that waits on it. The
 * thread runs the session (QueryRoute -> Telemetry Settings -> Heartbeat every
 * 10 s, Telemetry re-opened when it dies) and every timer of the lease table
 * (renewals, deadlines). The host starts operations from its own thread; each
 * returns an op id at once and finishes later as an MQL_EV_OP event with that
 * id. Nothing here blocks on the network, and the thread never calls the host.
 *
 * Locking: client->mu guards everything below it; the thread holds it while it
 * handles a completion or a timer, never while it waits.
 *
 * Every function declared here is mql_client.c's, the top of the client: an
 * operation takes c->mu and hands over to the stage that owns it (the map is
 * at the top of mql_base.h). The types it shares with the stages are in
 * mql_client_types.h.
 */
#ifndef MQL_CLIENT_H
#define MQL_CLIENT_H

#include <pthread.h>
#include <stdint.h>

#include "mql.h"
#include "mql_client_types.h"
#include "mql_events.h"
#include "mql_lease.h"
#include "mql_metrics.h"

/* Creates the client and starts its session; the start finishes as an event
 * whose op is *start_op. NULL only if the thread or descriptor cannot be made. */
mql_client *mql_client_new(const mql_config *cfg, uint64_t *start_op, char *err, size_t errlen);
/* Cancels what is in flight, stops the thread, tears grpc down, and drops the
 * host's reference. Leases still held are left to expire (the host nacks them
 * first if it wants). Whoever else holds a reference (a signal watcher) may
 * still call it: operations then answer CLOSED without touching the network.
 * The memory goes with the last reference. */
void mql_client_free(mql_client *c);
void mql_client_ref(mql_client *c);
void mql_client_unref(mql_client *c);
/* The per-call deadline, for those who wait for the client's calls. */
int64_t mql_client_request_timeout_ms(const mql_client *c);

int mql_client_fd(const mql_client *c);
mql_event *mql_client_take_events(mql_client *c);
void mql_client_requeue_events(mql_client *c, mql_event *list);
/* The host could not take ev (Lua had no memory for its values): counted as
 * events_dropped, and the leases of its messages are nacked (to come back
 * after corrupt_delay; no op waits for those nacks), so no message is held
 * that nobody sees. */
void mql_client_event_dropped(mql_client *c, const mql_event *ev);
const char *mql_client_id(const mql_client *c);

/* Operations: each returns the op id of its event. */
/* Takes at most batch messages and, if max_bytes > 0, no more body bytes than
 * max_bytes (but always the first message, so a body larger than the budget
 * still gets through); from the first message past either bound, the rest of
 * the stream is given back at once (counted in given_back by reason). */
uint64_t mql_client_receive(mql_client *c, int batch, int64_t await_ms, size_t max_bytes);
uint64_t mql_client_ack(mql_client *c, const uint64_t *lease_ids, size_t n);
uint64_t mql_client_nack(mql_client *c, uint64_t lease_id, int64_t delay_ms);
/* Forwards the message to the group's dead-letter queue (%DLQ%<group>) with
 * ForwardMessageToDeadLetterQueue; the proxy then acks it. reason is a short
 * word counted in metrics (dead_lettered). Ends the lease as acked. */
uint64_t mql_client_dead_letter(mql_client *c, uint64_t lease_id, const char *reason);
/* Stops renewing; the message comes back when its deadline passes. */
int mql_client_let_expire(mql_client *c, uint64_t lease_id);
uint64_t mql_client_send(mql_client *c, const char *topic, const uint8_t *body, size_t len,
                         const mql_send_opts *opts);
/* RecallMessage (RocketMQ 5.3.2+): takes back a delay message not delivered yet,
 * by the recall handle its send answered. A proxy without it answers UNIMPLEMENTED. */
uint64_t mql_client_recall(mql_client *c, const char *topic, const char *handle);

/* SyncLiteSubscription (RocketMQ 5.5, lite consumers only): action (an
 * apache.rocketmq.v2.LiteSubscriptionAction) on the lite topics names[0..n) under
 * the consumer's topic. A proxy without it answers UNIMPLEMENTED. */
uint64_t mql_client_sync_lite(mql_client *c, int action, const char *const *names, size_t n);
/* Ends a half message (mql_transaction.h): commit or roll back, from_check
 * when it answers the proxy's RecoverOrphanedTransactionCommand. */
uint64_t mql_client_end_transaction(mql_client *c, const char *topic, const char *message_id,
                                    const char *transaction_id, int commit, int from_check,
                                    const char *trace_context);
uint64_t mql_client_terminate(mql_client *c);
/* QueryRoute for a topic: OK if the proxy knows it (TOPIC_NOT_FOUND else). */
uint64_t mql_client_route(mql_client *c, const char *topic);

/* Snapshot of one lease; 0 if the id is not in the table (acked, nacked, lost). */
int mql_client_lease_info(mql_client *c, uint64_t lease_id, mql_lease_info *out);

void mql_client_metrics(mql_client *c, mql_metrics *out, size_t *inflight);
/* Gives back every lease the table holds that is not already being released
 * (a nack to delay_ms), whether or not the host still references it: for close
 * and shutdown. One op answers for all of them. */
uint64_t mql_client_nack_all(mql_client *c, int64_t delay_ms);
/* Waits (blocking, up to timeout_ms) until no lease is held; returns how many remain. */
int mql_client_wait_released(mql_client *c, int64_t timeout_ms);
/* Ends the receives in flight at once (they finish with CANCELLED). */
void mql_client_cancel_receives(mql_client *c);

#endif /* MQL_CLIENT_H */
