/* session_test.c -- the session's handlers driven by hand, without a server:
 * a finished call is built with the reply a proxy would have sent and given to
 * the handler the client thread would run, on a client whose channel points
 * nowhere (grpc connects lazily, so nothing goes out unless a call starts). */
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <stdlib.h>
#include <string.h>

#include "mql_call.h"
#include "mql_client_private.h"
#include "mql_test.h"

/* A QueryRoute reply "OK, one readable queue on 127.0.0.1:1" as a byte buffer. */
static grpc_byte_buffer *route_reply(void) {
    Apache__Rocketmq__V2__QueryRouteResponse resp = APACHE__ROCKETMQ__V2__QUERY_ROUTE_RESPONSE__INIT;
    Apache__Rocketmq__V2__Status st = APACHE__ROCKETMQ__V2__STATUS__INIT;
    Apache__Rocketmq__V2__MessageQueue q = APACHE__ROCKETMQ__V2__MESSAGE_QUEUE__INIT, *qs[1] = {&q};
    Apache__Rocketmq__V2__Broker b = APACHE__ROCKETMQ__V2__BROKER__INIT;
    Apache__Rocketmq__V2__Endpoints ep = APACHE__ROCKETMQ__V2__ENDPOINTS__INIT;
    Apache__Rocketmq__V2__Address a = APACHE__ROCKETMQ__V2__ADDRESS__INIT, *as[1] = {&a};
    uint8_t buf[512];
    size_t len;
    grpc_slice s;
    grpc_byte_buffer *bb;
    st.code = APACHE__ROCKETMQ__V2__CODE__OK;
    a.host = "127.0.0.1";
    a.port = 1;
    ep.n_addresses = 1;
    ep.addresses = as;
    b.name = "broker-a";
    b.endpoints = &ep;
    q.broker = &b;
    q.permission = APACHE__ROCKETMQ__V2__PERMISSION__READ_WRITE;
    resp.status = &st;
    resp.n_message_queues = 1;
    resp.message_queues = qs;
    len = protobuf_c_message_pack(&resp.base, buf);
    s = grpc_slice_from_copied_buffer((const char *)buf, len);
    bb = grpc_raw_byte_buffer_create(&s, 1);
    grpc_slice_unref(s);
    return bb;
}

/* Defect 5 of issue 10: close() cancels every call in c->calls and joins the
 * thread once none is left. A route reply that had already arrived when close
 * cancelled reaches the thread afterwards as a success; the handler went on to
 * open Telemetry, a stream with no deadline, which close had not cancelled, so
 * the thread waited for it forever. Once stopping, no call may start. */
static void a_route_reply_after_close_opens_no_telemetry_stream(void) {
    mql_client c;
    grpc_channel_credentials *cr;
    mql_call *route, *call;
    grpc_event ev;
    memset(&c, 0, sizeof(c));
    grpc_init();
    c.type = MQL_CONSUMER;
    c.endpoint = "127.0.0.1:1";
    c.host = "127.0.0.1";
    c.port = 1;
    c.group = "g";
    c.topic = "t";
    c.filter = "*";
    c.request_timeout_ms = 1000;
    c.id.client_id = "session-test";
    c.cq = grpc_completion_queue_create_for_next(NULL);
    cr = grpc_insecure_credentials_create();
    c.access = c.broker = grpc_channel_create(c.endpoint, cr, NULL);
    grpc_channel_credentials_release(cr);

    route = mql_call_new(c.access, c.cq, MQL_M_QUERY_ROUTE, 1000, &c.id);
    route->owner = &c;
    route->kind = MQL_K_ROUTE;
    route->status = GRPC_STATUS_OK;
    route->recv_buf = route_reply();
    c.stopping = 1;                      /* close() ran between the reply and its handler */
    mql_session_on_route_done(&c, route);
    CHECK(c.broker_name && strcmp(c.broker_name, "broker-a") == 0);   /* taken as a success */
    CHECK(c.calls == NULL);
    CHECK(c.telemetry == NULL);

    /* what close does next, so the test ends cleanly even if a stream opened */
    mql_call_free(route);
    for (call = c.calls; call; call = call->next) mql_call_cancel(call);
    grpc_channel_destroy(c.access);
    grpc_completion_queue_shutdown(c.cq);
    do ev = grpc_completion_queue_next(c.cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
    while (ev.type != GRPC_QUEUE_SHUTDOWN);
    grpc_completion_queue_destroy(c.cq);
    while ((call = c.calls)) {
        mql_client_unlink(&c, call);
        mql_call_free(call);
    }
    free(c.broker_name);
    grpc_shutdown();
}

int main(void) {
    RUN(a_route_reply_after_close_opens_no_telemetry_stream);
    return TEST_REPORT("session_test");
}
