/* mql_transaction.c -- ending a half message: EndTransaction.
 *
 * A transactional send (mql_producer.c) stores a half message the broker
 * keeps invisible; EndTransaction commits it (the broker writes it to its
 * topic) or rolls it back (never delivered). The proxy checks only that a
 * transaction id is there (EndTransactionActivity: INVALID_TRANSACTION_ID
 * otherwise) and hands the rest to the broker, which answers OK even for a
 * transaction it has already ended. The source says who decided: the
 * producer itself, or its checker when the proxy asked over Telemetry
 * (RecoverOrphanedTransactionCommand, mql_session.c); the broker treats
 * both alike, and logs the check's.
 *
 * Every function here runs with c->mu held.
 */
#include "mql_transaction.h"

static void on_end_done(mql_client *c, mql_call *call);

static const mql_call_ops end_ops = {.on_done = on_end_done};

uint64_t mql_transaction_end(mql_client *c, const char *topic_name, const char *message_id,
                             const char *transaction_id, int commit, int from_check,
                             const char *trace_context) {
    Apache__Rocketmq__V2__EndTransactionRequest req = APACHE__ROCKETMQ__V2__END_TRANSACTION_REQUEST__INIT;
    mql_pb_resource topic;
    mql_call *call;
    uint64_t op = ++c->next_op;
    mql_set_resource(&topic, c->namespace_, topic_name);
    req.topic = &topic;
    req.message_id = (char *)message_id;
    req.transaction_id = (char *)transaction_id;
    req.resolution = commit ? APACHE__ROCKETMQ__V2__TRANSACTION_RESOLUTION__COMMIT
                            : APACHE__ROCKETMQ__V2__TRANSACTION_RESOLUTION__ROLLBACK;
    req.source = from_check ? APACHE__ROCKETMQ__V2__TRANSACTION_SOURCE__SOURCE_SERVER_CHECK
                            : APACHE__ROCKETMQ__V2__TRANSACTION_SOURCE__SOURCE_CLIENT;
    if (trace_context && trace_context[0]) req.trace_context = (char *)trace_context;
    call = mql_base_call(c, c->broker, MQL_M_END_TRANSACTION, c->request_timeout_ms, &end_ops, op, NULL);
    if (mql_base_unary(c, call, &req.base) < 0)
        op = mql_base_post_refusal(c, "INTERNAL", "EndTransaction: grpc refused to start the call");
    return op;
}

static void on_end_done(mql_client *c, mql_call *call) {
    mql_result r;
    void *resp = mql_call_reply(call, &apache__rocketmq__v2__end_transaction_response__descriptor, &r);
    if (!r.ok) mql_metrics_error(&c->metrics, "end_transaction", r.code);
    mql_call_reply_free(resp);
    mql_base_post_op(c, call->op, &r);
}
