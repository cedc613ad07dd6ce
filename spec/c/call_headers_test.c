/* call_headers_test.c -- the headers every call sends (mql_call.c), without
 * a server: the calls go to a channel nobody listens on and are only built.
 * The values come from the client's header cache; each call must still get
 * its own request id, today's date, and a signature over the date it sends. */
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <string.h>

#include "mql_call.h"
#include "mql_test.h"

static int value_of(const mql_call *c, const char *key, char *out, size_t outlen) {
    size_t i;
    for (i = 0; i < c->nmd; i++) {
        grpc_slice k = c->md[i].key, v = c->md[i].value;
        if (GRPC_SLICE_LENGTH(k) == strlen(key) && memcmp(GRPC_SLICE_START_PTR(k), key, strlen(key)) == 0) {
            size_t n = GRPC_SLICE_LENGTH(v) < outlen - 1 ? GRPC_SLICE_LENGTH(v) : outlen - 1;
            memcpy(out, GRPC_SLICE_START_PTR(v), n);
            out[n] = '\0';
            return 1;
        }
    }
    return 0;
}

static void channel_free(mql_channel *ch, grpc_channel_credentials *cr, grpc_completion_queue *cq) {
    mql_call_channel_unref(ch);
    grpc_channel_credentials_release(cr);
    grpc_completion_queue_shutdown(cq);
    while (grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL).type !=
           GRPC_QUEUE_SHUTDOWN) {}
    grpc_completion_queue_destroy(cq);
}

static int uuid_shaped(const char *s) {
    int i;
    if (strlen(s) != 36) return 0;
    for (i = 0; i < 36; i++) {
        if (i == 8 || i == 13 || i == 18 || i == 23) {
            if (s[i] != '-') return 0;
        } else if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'A' && s[i] <= 'F'))) {
            return 0;
        }
    }
    return 1;
}

static void expected_signature(const char *secret, const char *date, char *out) {
    unsigned char mac[EVP_MAX_MD_SIZE];
    size_t n = 0, i;
    EVP_Q_mac(NULL, "HMAC", NULL, "SHA1", NULL, secret, strlen(secret),
              (const unsigned char *)date, strlen(date), mac, sizeof(mac), &n);
    for (i = 0; i < n; i++) sprintf(out + 2 * i, "%02X", mac[i]);
}

/* 300 calls: 300 different request ids, each UUID-shaped; the fixed values
 * as configured; the date one of this run's seconds; the signature the
 * HMAC of the date that same call carries. */
static void every_call_gets_its_own_id_and_a_signature_over_its_date(void) {
    grpc_completion_queue *cq = grpc_completion_queue_create_for_next(NULL);
    grpc_channel_credentials *cr = grpc_insecure_credentials_create();
    mql_channel *ch = mql_call_channel_new(grpc_channel_create("127.0.0.1:1", cr, NULL));
    mql_identity id;
    static char ids[300][40];
    char v[512], date[40], want[512], sig[64];
    int i, j, unique = 1, shaped = 1, fixed = 1, signed_ok = 1;
    memset(&id, 0, sizeof(id));
    id.client_id = "host@1@2@abcdefghijklmnopqrstuvwxyz";   /* longer than a slice inlines */
    id.namespace_ = "ns1";
    id.access_key = "AK";
    id.secret_key = "SK-secret";
    id.security_token = "token-1";
    for (i = 0; i < 300; i++) {
        mql_call *c = mql_call_new(ch, cq, "/apache.rocketmq.v2.MessagingService/Heartbeat", 1000, &id);
        if (!value_of(c, "x-mq-request-id", ids[i], sizeof(ids[i])) || !uuid_shaped(ids[i])) shaped = 0;
        for (j = 0; j < i && unique; j++)
            if (strcmp(ids[i], ids[j]) == 0) unique = 0;
        if (!value_of(c, "x-mq-client-id", v, sizeof(v)) || strcmp(v, id.client_id) != 0) fixed = 0;
        if (!value_of(c, "x-mq-namespace", v, sizeof(v)) || strcmp(v, "ns1") != 0) fixed = 0;
        if (!value_of(c, "x-mq-session-token", v, sizeof(v)) || strcmp(v, "token-1") != 0) fixed = 0;
        if (!value_of(c, "x-mq-language", v, sizeof(v)) || strcmp(v, "CPP") != 0) fixed = 0;
        if (!value_of(c, "x-mq-date-time", date, sizeof(date)) || strlen(date) != 16 || date[8] != 'T')
            fixed = 0;
        expected_signature("SK-secret", date, sig);
        snprintf(want, sizeof(want),
                 "MQv2-HMAC-SHA1 Credential=AK, SignedHeaders=x-mq-date-time, Signature=%s", sig);
        if (!value_of(c, "authorization", v, sizeof(v)) || strcmp(v, want) != 0) signed_ok = 0;
        if (c->nmd != 9 || c->md_cap != 9) fixed = 0;   /* every header had its slot */
        grpc_call_cancel(c->call, NULL);
        mql_call_free(c);
    }
    CHECK(shaped);
    CHECK(unique);
    CHECK(fixed);
    CHECK(signed_ok);
    mql_call_identity_clear(&id);
    channel_free(ch, cr, cq);
}

/* Without credentials no authorization header; without a namespace none either;
 * and no room kept for them. */
static void no_credentials_no_authorization(void) {
    grpc_completion_queue *cq = grpc_completion_queue_create_for_next(NULL);
    grpc_channel_credentials *cr = grpc_insecure_credentials_create();
    mql_channel *ch = mql_call_channel_new(grpc_channel_create("127.0.0.1:1", cr, NULL));
    mql_identity id;
    mql_call *c;
    char v[128];
    memset(&id, 0, sizeof(id));
    id.client_id = "c";
    c = mql_call_new(ch, cq, "/apache.rocketmq.v2.MessagingService/Heartbeat", 1000, &id);
    CHECK(!value_of(c, "authorization", v, sizeof(v)));
    CHECK(!value_of(c, "x-mq-namespace", v, sizeof(v)));
    CHECK(value_of(c, "x-mq-client-id", v, sizeof(v)) && strcmp(v, "c") == 0);
    /* the six headers of a plain client; the call stays in glibc's tcache sizes */
    CHECK(c->nmd == 6);
    CHECK(sizeof(mql_call) + c->md_cap * sizeof(grpc_metadata) <= 1016);
    grpc_call_cancel(c->call, NULL);
    mql_call_free(c);
    mql_call_identity_clear(&id);
    channel_free(ch, cr, cq);
}

int main(void) {
    grpc_init();
    RUN(every_call_gets_its_own_id_and_a_signature_over_its_date);
    RUN(no_credentials_no_authorization);
    grpc_shutdown();
    return TEST_REPORT("call_headers_test");
}
