/* mql_endpoint.h -- how a client reaches its proxy (see mql_endpoint.c): the
 * endpoint list, the one in use, and the grpc channels to it. Runs with c->mu
 * held unless it says otherwise.
 */
#ifndef MQL_ENDPOINT_H
#define MQL_ENDPOINT_H

#include "mql_base.h"

/* Endpoints as a request carries them (QueryRoute, Settings): one address,
 * built in place by mql_endpoint_describe, pointing at the strings given. */
typedef struct mql_endpoint_buf {
    Apache__Rocketmq__V2__Endpoints ep;
    Apache__Rocketmq__V2__Address addr;
    Apache__Rocketmq__V2__Address *addrs[1];
} mql_endpoint_buf;

/* Fills b with host:port. The scheme is IPv4 for a dotted quad and a domain
 * name otherwise, never UNSPECIFIED, which the proxy refuses. */
void mql_endpoint_describe(mql_endpoint_buf *b, const char *host, int port);
/* Checks every entry of c->endpoint_list and takes the first; -1 and err if
 * one is not host:port. Runs before the thread, without c->mu. */
int mql_endpoint_list_init(mql_client *c, char *err, size_t errlen);
/* Takes entry i of c->endpoint_list as the endpoint in use; -1 and err if
 * there is no such entry or it is not host:port. */
int mql_endpoint_use(mql_client *c, size_t i, char *err, size_t errlen);
/* New channels to the endpoint in use; the old ones live on until the last
 * call in flight on them ends. */
void mql_endpoint_channels_renew(mql_client *c);
/* The route's endpoint for the session's stream and the messages' calls
 * (c->broker): our own endpoint's channel when the route names it, else a
 * new channel to the address it names. */
void mql_endpoint_take_route(mql_client *c, const Apache__Rocketmq__V2__Endpoints *ep);
/* The arguments of every channel a client opens (at most
 * MQL_CHANNEL_ARGS_MAX), and their number. */
#define MQL_CHANNEL_ARGS_MAX 6
size_t mql_endpoint_channel_args(const mql_client *c, grpc_arg args[MQL_CHANNEL_ARGS_MAX]);
/* A channel to target with the client's channel arguments and credentials
 * (plaintext, or TLS as configured). */
mql_channel *mql_endpoint_channel_new(const mql_client *c, const char *target);

#endif /* MQL_ENDPOINT_H */
