/* mql_endpoint.c -- how a client reaches its proxy.
 *
 * The endpoint list is the user's `endpoints`, entries split by ';'; one is in
 * use at a time (c->endpoint, c->host, c->port), and mql_session.c moves to
 * another when a start or a reconnect finds nothing answering, as the official
 * clients go through theirs. Each endpoint is reached over two channels
 * (c->access for the session's calls, c->broker for the messages', one channel
 * unless the route names another address: mql_endpoint_take_route), plaintext
 * or TLS on the same port.
 *
 * Every function here runs with c->mu held unless it says otherwise.
 */
#include "mql_endpoint.h"

#include <grpc/grpc_security.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int is_ipv4(const char *h) {
    int dots = 0;
    for (; *h; h++) {
        if (*h == '.') dots++;
        else if (*h < '0' || *h > '9') return 0;
    }
    return dots == 3;
}

void mql_endpoint_describe(mql_endpoint_buf *b, const char *host, int port) {
    apache__rocketmq__v2__endpoints__init(&b->ep);
    apache__rocketmq__v2__address__init(&b->addr);
    b->ep.scheme = is_ipv4(host) ? APACHE__ROCKETMQ__V2__ADDRESS_SCHEME__IPv4
                                 : APACHE__ROCKETMQ__V2__ADDRESS_SCHEME__DOMAIN_NAME;
    b->addr.host = (char *)host;
    b->addr.port = port;
    b->addrs[0] = &b->addr;
    b->ep.n_addresses = 1;
    b->ep.addresses = b->addrs;
}


/* Takes entry i of c->endpoint_list (entries split by ';', blanks around them
 * dropped) as the endpoint in use; -1 and err if it is not host:port. */
int mql_endpoint_use(mql_client *c, size_t i, char *err, size_t errlen) {
    const char *p = c->endpoint_list, *end, *colon;
    size_t n, k;
    long port;
    char *tail;
    for (k = 0;; k++, p = end + 1) {
        while (*p == ' ' || *p == '\t') p++;
        end = strchr(p, ';');
        if (!end) end = p + strlen(p);
        if (k == i) break;
        if (!*end) {
            snprintf(err, errlen, "endpoints: no entry %zu", i + 1);
            return -1;
        }
    }
    n = (size_t)(end - p);
    while (n > 0 && (p[n - 1] == ' ' || p[n - 1] == '\t')) n--;
    colon = memrchr(p, ':', n);
    if (!colon || colon == p) {
        snprintf(err, errlen, "endpoints: expected host:port, got '%.*s'", (int)(n > 200 ? 200 : n), p);
        return -1;
    }
    port = strtol(colon + 1, &tail, 10);
    if (tail != p + n || tail == colon + 1 || port <= 0 || port > 65535) {
        snprintf(err, errlen, "endpoints: bad port in '%.*s'", (int)(n > 200 ? 200 : n), p);
        return -1;
    }
    free(c->endpoint);
    free(c->host);
    c->endpoint = mql_xmalloc(n + 1);
    memcpy(c->endpoint, p, n);
    c->endpoint[n] = '\0';
    c->host = mql_xmalloc((size_t)(colon - p) + 1);
    memcpy(c->host, p, (size_t)(colon - p));
    c->host[colon - p] = '\0';
    c->port = (int)port;
    c->endpoint_at = i;
    return 0;
}

int mql_endpoint_list_init(mql_client *c, char *err, size_t errlen) {
    size_t i, n = 1;
    const char *p;
    for (p = c->endpoint_list; *p; p++) n += *p == ';';
    /* checks them all, from the last, and ends on the first */
    for (i = n; i-- > 0;)
        if (mql_endpoint_use(c, i, err, errlen) < 0) return -1;
    c->nendpoints = n;
    return 0;
}

/* New channels to the endpoint in use. The old ones live on until the last
 * call in flight on them ends (mql_channel): grpc_channel_destroy would fail
 * the receives, acks and renewals still out on them ("Channel Destroyed"). */
void mql_endpoint_channels_renew(mql_client *c) {
    if (c->broker != c->access) mql_call_channel_unref(c->broker);
    mql_call_channel_unref(c->access);
    c->access = c->broker = mql_endpoint_channel_new(c, c->endpoint);
}

/* A proxy in cluster mode names the endpoint we dialled; one in local mode
 * names its broker's own address with the proxy's gRPC port
 * (org.apache.rocketmq.proxy.service.route.LocalTopicRouteService), which may
 * differ from what we dialled (a DNS name, a load balancer). When a later
 * route names our endpoint again, the session goes back to it: the channel
 * to the address an earlier route named would carry the stream, receives,
 * renewals and acks to a proxy the route no longer lists. */
void mql_endpoint_take_route(mql_client *c, const Apache__Rocketmq__V2__Endpoints *ep) {
    const Apache__Rocketmq__V2__Address *a;
    char target[300];
    if (c->broker != c->access) mql_call_channel_unref(c->broker);
    c->broker = c->access;
    if (!ep || ep->n_addresses == 0 || !(a = ep->addresses[0])) return;
    /* no address at all is no reason to leave a proxy that answers */
    if (!a->host || !*a->host || a->port <= 0 || a->port > 65535) return;
    /* an IPv6 host comes bare (Guava's HostAndPort.getHost): grpc reads
     * "::1:8081" as one IPv6 address on its default port */
    if (strchr(a->host, ':') && *a->host != '[')
        snprintf(target, sizeof(target), "[%s]:%d", a->host, a->port);
    else
        snprintf(target, sizeof(target), "%s:%d", a->host, a->port);
    if (strcmp(target, c->endpoint) != 0) c->broker = mql_endpoint_channel_new(c, target);
}

/* TLS credentials as configured. The proxy serves TLS and plaintext on one
 * port (its ProxyAndTlsProtocolNegotiator), so tls only changes how we dial.
 * grpc's TLS options, not its SSL ones: only they can skip the check of the
 * proxy's certificate (insecure), which the official Java client does by
 * default (trust-all) and a proxy in test mode needs (self-signed). */
static grpc_channel_credentials *tls_credentials(const mql_client *c) {
    grpc_tls_credentials_options *o = grpc_tls_credentials_options_create();
    grpc_tls_identity_pairs *pairs = NULL;
    if (c->tls_cert_pem && c->tls_key_pem) {
        pairs = grpc_tls_identity_pairs_create();
        grpc_tls_identity_pairs_add_pair(pairs, c->tls_key_pem, c->tls_cert_pem);
    }
    if (c->tls_ca_pem || pairs) {
        /* the provider copies the CA and takes the pairs */
        grpc_tls_certificate_provider *p =
            grpc_tls_certificate_provider_static_data_create(c->tls_ca_pem, pairs);
        grpc_tls_credentials_options_set_certificate_provider(o, p);
        grpc_tls_certificate_provider_release(p);
        if (c->tls_ca_pem) grpc_tls_credentials_options_watch_root_certs(o);
        if (pairs) grpc_tls_credentials_options_watch_identity_key_cert_pairs(o);
    }
    if (c->tls_insecure) {
        grpc_tls_certificate_verifier *v = grpc_tls_certificate_verifier_no_op_create();
        grpc_tls_credentials_options_set_verify_server_cert(o, 0);
        grpc_tls_credentials_options_set_certificate_verifier(o, v);
        grpc_tls_certificate_verifier_release(v);
        grpc_tls_credentials_options_set_check_call_host(o, 0);
    }
    return grpc_tls_credentials_create(o);   /* takes o */
}

static grpc_arg int_arg(const char *key, int value) {
    grpc_arg a;
    a.type = GRPC_ARG_INTEGER;
    a.key = (char *)key;
    a.value.integer = value;
    return a;
}

size_t mql_endpoint_channel_args(const mql_client *c, grpc_arg args[MQL_CHANNEL_ARGS_MAX]) {
    size_t n = 0;
    args[n++] = int_arg(GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH,
                        130 * 1024 * 1024);   /* the proxy's own inbound limit */
    args[n++] = int_arg(GRPC_ARG_KEEPALIVE_TIME_MS, 30000);
    /* grpc's own reconnection backs off up to 120 s by default: a proxy back
     * after a restart would stay unused for up to two minutes. Our cap. */
    args[n++] = int_arg(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, MQL_BACKOFF_CAP_MS);
    /* grpc's retry layer copies every call's headers and message in case it
     * must resend them, and without a retry policy (none is configured) it
     * would only resend a call the proxy never saw (a "transparent" retry).
     * mqlease retries each call on its own terms: a renewal within its
     * budget, a receive in its loop; a failed send or ack is the caller's to
     * see. Without the layer a renewal costs about 20 µs of CPU instead of
     * 24 (issue 24, bench/README.md). */
    args[n++] = int_arg(GRPC_ARG_ENABLE_RETRIES, 0);
    /* per-call counters for a channelz service that nothing here serves */
    args[n++] = int_arg(GRPC_ARG_ENABLE_CHANNELZ, 0);
    if (c->tls && c->tls_server_name) {
        args[n].type = GRPC_ARG_STRING;
        args[n].key = GRPC_SSL_TARGET_NAME_OVERRIDE_ARG;
        args[n++].value.string = c->tls_server_name;
    }
    return n;
}

mql_channel *mql_endpoint_channel_new(const mql_client *c, const char *target) {
    grpc_channel_credentials *cr =
        c->tls ? tls_credentials(c) : grpc_insecure_credentials_create();
    grpc_arg args[MQL_CHANNEL_ARGS_MAX];
    grpc_channel_args ca;
    grpc_channel *ch;
    ca.num_args = mql_endpoint_channel_args(c, args);
    ca.args = args;
    ch = grpc_channel_create(target, cr, &ca);
    grpc_channel_credentials_release(cr);
    return mql_call_channel_new(ch);
}
