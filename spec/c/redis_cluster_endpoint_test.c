/* redis_cluster_endpoint_test.c -- the addresses a Redis Cluster node may
 * name, through fake nodes on socketpairs (cluster_fake.h). The CLUSTER SLOTS
 * documentation (redis.io/commands/cluster-slots) gives three endpoints that
 * are no host name: NULL (the node's endpoint is unknown, its
 * cluster-preferred-endpoint-type being unknown-endpoint) and "" (a node
 * that does not know its own IP, as in a cluster of one node: Redis 7.0.15
 * answers so) both mean the node the question was sent to, with the port
 * given; "?" (hostname endpoints, no cluster-announce-hostname set) is an
 * unknown node, and clusterRedirectClient (src/cluster.c) writes the same
 * "?" into a MOVED or an ASK. And the redirections themselves: an ASK is
 * followed with ASKING and leaves the map, a MOVED updates it, a loop ends. */
#include <signal.h>

#include "cluster_fake.h"
#include "mql_test.h"

#define HELLO_SLOT 866   /* CLUSTER KEYSLOT hello */

static void setup(fake *f, mql_cluster *cl, const char *slots, fake_answer_fn answer) {
    fake_init(f);
    fake_set_slots(f, strdup(slots));
    f->answer = answer;
    f->dead[f->ndead++] = "";    /* no resolver finds "": "Name or service not known" */
    f->dead[f->ndead++] = "?";
    mql_cluster_init(cl);
    mql_cluster_add_seed(cl, "seed-1", 7000);
}

static void finish(fake *f, mql_cluster *cl) {
    mql_cluster_close(cl);
    fake_end(f);
}

/* Runs SET hello on a cluster whose only master is named by `endpoint` (RESP
 * text) on port 7001: it must go to the seed that was asked, on that port. */
static void runs_on_the_node_asked(const char *endpoint) {
    char slots[256];
    fake f;
    mql_cluster cl;
    mql_result res;
    redisReply *reply;
    int node;
    snprintf(slots, sizeof(slots), "*1\r\n*3\r\n:0\r\n:16383\r\n*3\r\n%s:7001\r\n$2\r\nid\r\n",
             endpoint);
    setup(&f, &cl, slots, NULL);
    reply = run_set(&cl, &f, "hello", &res);
    CHECK(reply && reply->type == REDIS_REPLY_STATUS);
    if (!reply) fprintf(stderr, "  %s: %s\n", res.code, res.msg);
    CHECK(strcmp(f.cmds, "seed-1:CLUSTER seed-1:SET ") == 0);
    node = cl.slot_node[HELLO_SLOT];
    CHECK(node >= 0 && strcmp(cl.nodes[node].host, "seed-1") == 0 && cl.nodes[node].port == 7001);
    if (reply) freeReplyObject(reply);
    finish(&f, &cl);
}

static void an_empty_endpoint_is_the_node_that_was_asked(void) {
    runs_on_the_node_asked("$0\r\n\r\n");
}

static void a_null_endpoint_is_the_node_that_was_asked(void) {
    runs_on_the_node_asked("$-1\r\n");
}

static void a_question_mark_endpoint_is_no_node(void) {
    /* slots 0-8191 on "?", the rest on node-b */
    const char *slots = "*2\r\n"
                        "*3\r\n:0\r\n:8191\r\n*3\r\n$1\r\n?\r\n:7000\r\n$2\r\nid\r\n"
                        "*3\r\n:8192\r\n:16383\r\n*3\r\n$6\r\nnode-b\r\n:7000\r\n$2\r\nid\r\n";
    fake f;
    mql_cluster cl;
    mql_result res;
    redisReply *reply;
    setup(&f, &cl, slots, NULL);
    reply = run_set(&cl, &f, "hello", &res);   /* slot 866: no node known */
    CHECK(reply == NULL && !res.ok && strcmp(res.code, "UNAVAILABLE") == 0);
    CHECK(strstr(f.log, "? ") == NULL);
    CHECK(cl.slot_node[HELLO_SLOT] < 0);
    if (reply) freeReplyObject(reply);
    reply = run_set(&cl, &f, "foo", &res);     /* slot 12182: node-b's */
    CHECK(reply && reply->type == REDIS_REPLY_STATUS);
    CHECK(strstr(f.cmds, "node-b:SET") != NULL);
    if (reply) freeReplyObject(reply);
    finish(&f, &cl);
}

static const char one_master[] =
    "*1\r\n*3\r\n:0\r\n:16383\r\n*3\r\n$6\r\nnode-a\r\n:7000\r\n$2\r\nid\r\n";

static int is_set(const redisReply *cmd) {
    return strcasecmp(cmd->element[0]->str, "SET") == 0;
}

static const char *node_a_moves_to_unknown(const char *host, const redisReply *cmd, char *out,
                                           size_t outlen) {
    (void)out, (void)outlen;
    return strcmp(host, "node-a") == 0 && is_set(cmd) ? "-MOVED 866 ?:7000\r\n" : NULL;
}

static void a_moved_to_an_unknown_endpoint_is_not_followed(void) {
    fake f;
    mql_cluster cl;
    mql_result res;
    redisReply *reply;
    setup(&f, &cl, one_master, node_a_moves_to_unknown);
    reply = run_set(&cl, &f, "hello", &res);
    /* the node's own answer, an error: the command did not run anywhere */
    CHECK(reply && reply->type == REDIS_REPLY_ERROR && strncmp(reply->str, "MOVED", 5) == 0);
    CHECK(strstr(f.log, "? ") == NULL);
    CHECK(cl.stale);   /* a slot moved: the next command reads the map again */
    if (reply) freeReplyObject(reply);
    finish(&f, &cl);
}

static const char *node_a_asks_node_b(const char *host, const redisReply *cmd, char *out,
                                      size_t outlen) {
    (void)out, (void)outlen;
    return strcmp(host, "node-a") == 0 && is_set(cmd) ? "-ASK 866 node-b:7000\r\n" : NULL;
}

static void an_ask_is_followed_with_asking_and_leaves_the_map(void) {
    fake f;
    mql_cluster cl;
    mql_result res;
    redisReply *reply;
    setup(&f, &cl, one_master, node_a_asks_node_b);
    reply = run_set(&cl, &f, "hello", &res);
    CHECK(reply && reply->type == REDIS_REPLY_STATUS);
    CHECK(strstr(f.cmds, "node-a:SET node-b:ASKING node-b:SET ") != NULL);
    CHECK(!cl.stale && strcmp(cl.nodes[cl.slot_node[HELLO_SLOT]].host, "node-a") == 0);
    if (reply) freeReplyObject(reply);
    finish(&f, &cl);
}

static const char *node_a_moves_to_node_b(const char *host, const redisReply *cmd, char *out,
                                          size_t outlen) {
    (void)out, (void)outlen;
    return strcmp(host, "node-a") == 0 && is_set(cmd) ? "-MOVED 866 node-b:7000\r\n" : NULL;
}

static void a_moved_is_followed_and_updates_the_map(void) {
    fake f;
    mql_cluster cl;
    mql_result res;
    redisReply *reply;
    setup(&f, &cl, one_master, node_a_moves_to_node_b);
    reply = run_set(&cl, &f, "hello", &res);
    CHECK(reply && reply->type == REDIS_REPLY_STATUS);
    CHECK(strstr(f.cmds, "node-a:SET node-b:SET ") != NULL && !strstr(f.cmds, "ASKING"));
    CHECK(cl.stale && strcmp(cl.nodes[cl.slot_node[HELLO_SLOT]].host, "node-b") == 0);
    if (reply) freeReplyObject(reply);
    finish(&f, &cl);
}

static const char *node_a_moves_to_itself(const char *host, const redisReply *cmd, char *out,
                                          size_t outlen) {
    (void)out, (void)outlen;
    return strcmp(host, "node-a") == 0 && is_set(cmd) ? "-MOVED 866 node-a:7000\r\n" : NULL;
}

static void a_redirect_loop_ends_in_an_error(void) {
    fake f;
    mql_cluster cl;
    mql_result res;
    redisReply *reply;
    setup(&f, &cl, one_master, node_a_moves_to_itself);
    reply = run_set(&cl, &f, "hello", &res);
    CHECK(reply == NULL && !res.ok && strstr(res.msg, "too many redirects") != NULL);
    if (reply) freeReplyObject(reply);
    finish(&f, &cl);
}

int main(void) {
    signal(SIGPIPE, SIG_IGN);   /* a fake node's far end may be gone when written to */
    RUN(an_empty_endpoint_is_the_node_that_was_asked);
    RUN(a_null_endpoint_is_the_node_that_was_asked);
    RUN(a_question_mark_endpoint_is_no_node);
    RUN(a_moved_to_an_unknown_endpoint_is_not_followed);
    RUN(an_ask_is_followed_with_asking_and_leaves_the_map);
    RUN(a_moved_is_followed_and_updates_the_map);
    RUN(a_redirect_loop_ends_in_an_error);
    return TEST_REPORT("redis_cluster_endpoint_test");
}
