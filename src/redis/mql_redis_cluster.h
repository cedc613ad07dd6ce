/* mql_redis_cluster.h -- Redis Cluster routing: slots, the slot map, redirects.
 *
 * Debian 12 packages no Cluster client for C (only hiredis 0.14), so this is
 * the small part of one that mqlease needs: the key's slot (CRC16 of the key
 * or of its {hash tag}, mod 16384), a slot -> node map read from CLUSTER
 * SLOTS, and MOVED/ASK/TRYAGAIN handling around one command. A MOVED or an
 * ASK proves the node did not run the command, so following it never runs a
 * command twice; a transport failure is returned, never retried, and marks
 * the map stale so the next command reads the topology again.
 *
 * The node table is what the last CLUSTER SLOTS named (masters, then their
 * replicas), plus the nodes a MOVED or ASK pointed to since; each load replaces
 * it, keeping the open connections of the nodes still named and closing the
 * rest. It has no fixed size: nodes come back with new addresses (pods) and a
 * table that only grew would fill up with the dead and refuse the new. The
 * seeds given at the start are kept apart and asked for the topology only
 * after every named node, so a dead seed costs nothing while the cluster
 * itself answers.
 */
#ifndef MQL_REDIS_CLUSTER_H
#define MQL_REDIS_CLUSTER_H

#include <hiredis/hiredis.h>
#include <stddef.h>
#include <stdint.h>

#include "mql.h"

#define MQL_CLUSTER_SLOTS 16384

/* CRC16-CCITT (XMODEM), the checksum Redis Cluster hashes keys with. */
uint16_t mql_crc16(const char *buf, size_t len);
/* The slot of a key: the CRC16 of its hash tag (the text between the first
 * '{' and the next '}', when not empty) or of the whole key, mod 16384. */
int mql_cluster_slot(const char *key, size_t len);

/* Parses "MOVED <slot> <host>:<port>" or "ASK ..."; returns 1 (MOVED), 2 (ASK)
 * or 0 (neither, or one to no known node: the host "?"). An empty host (Redis 7
 * may send ":port": the node that answered) stays empty. */
int mql_cluster_redirect(const char *err, int *slot, char *host, size_t hostlen, int *port);

typedef struct mql_cluster_node {
    char host[128];
    int port;
    redisContext *ctx;       /* connected lazily */
} mql_cluster_node;

typedef struct mql_cluster {
    mql_cluster_node *nodes; /* owned; see the top of this file */
    int nnodes, cap;
    mql_cluster_node *seeds; /* owned; tried last, their connections closed after use */
    int nseeds, seeds_cap;
    int32_t slot_node[MQL_CLUSTER_SLOTS];  /* node index, -1 when unknown */
    int stale;               /* read CLUSTER SLOTS before the next command */
} mql_cluster;

void mql_cluster_init(mql_cluster *cl);
/* Closes every connection and frees the tables; cl can be initialised again. */
void mql_cluster_close(mql_cluster *cl);
/* A node to ask for the topology when no named node answers. 0, or -1 if the
 * host name is too long. */
int mql_cluster_add_seed(mql_cluster *cl, const char *host, int port);
/* The index of host:port in the node table, added if new; -1 if the host name
 * is too long. An index holds until the next load. */
int mql_cluster_node_index(mql_cluster *cl, const char *host, int port);
/* Loads the map from a CLUSTER SLOTS reply, asked of the node at host asked,
 * and makes the node table what it names; returns the slots covered. An
 * endpoint NULL or "" is asked (at the port given); "?" names no node, and its
 * slots stay unmapped. A reply that covers none leaves the table as it was,
 * with no slot mapped. */
int mql_cluster_load_slots(mql_cluster *cl, const redisReply *reply, const char *asked);

/* Connects a node (connect + AUTH); NULL with res set on failure. */
typedef redisContext *(*mql_cluster_connect_fn)(void *arg, const char *host, int port,
                                                mql_result *res);

/* Runs one command on the node that owns argv[key_index] (key_index 0: any
 * node), following redirects. NULL with res set on a transport failure. */
redisReply *mql_cluster_run(mql_cluster *cl, mql_cluster_connect_fn connect, void *arg,
                            int argc, const char **argv, const size_t *lens, int key_index,
                            mql_result *res);

/* Runs n commands on the nodes that own their keys, each node's
 * share written as one pipeline and every node's in flight at once; the
 * replies are read as they come, from all nodes together, until one deadline
 * timeout_ms after the last write (mql_redis_cluster_pipeline.c). A node
 * that does not answer so fails its own commands (TIMEOUT, never sent again)
 * and delays no other node's. replies[i] is command i's reply, or NULL with
 * res[i] set. A MOVED, ASK or TRYAGAIN reply proves its command did not run:
 * that command alone runs again through mql_cluster_run. */
struct mql_redis_argv;
void mql_cluster_run_many(mql_cluster *cl, mql_cluster_connect_fn connect, void *arg,
                          int64_t timeout_ms, int n, const struct mql_redis_argv *cmds,
                          redisReply **replies, mql_result *res);

/* The parts of mql_cluster_run that mql_cluster_run_many shares. */
/* Reads the map first if it is stale; 0 with res ok (whatever a node asked
 * on the way said), else -1 with res set. */
int mql_cluster_ready(mql_cluster *cl, mql_cluster_connect_fn connect, void *arg,
                      mql_result *res);
/* The node index for a command's key (key_index 0: the first mapped node), or -1. */
int mql_cluster_route(const mql_cluster *cl, int argc, const char **argv, const size_t *lens,
                      int key_index);
/* Node i's connection, made again when missing or out of step; NULL with res set. */
redisContext *mql_cluster_node_ctx(mql_cluster *cl, int i, mql_cluster_connect_fn connect,
                                   void *arg, mql_result *res);
/* Node i's connection broke (or its reply is overdue): closed, and the map is
 * read again before the next command. */
void mql_cluster_node_broke(mql_cluster *cl, int i);
/* A transport failure on ctx as a result: TIMEOUT or UNAVAILABLE. */
void mql_cluster_transport_fail(const redisContext *ctx, mql_result *res, const char *what);

#endif /* MQL_REDIS_CLUSTER_H */
