/* redis_cluster_pipeline_test.c -- mql_cluster_run_many, a batch of commands
 * over every node of a Redis Cluster at once, through fake nodes on
 * socketpairs (cluster_fake.h): each reply is its own command's, a node that
 * is gone fails only its own commands, and an ASK is followed for its command
 * alone. (A node that never answers: redis_keepalive_cluster_test.c.) */
#include <signal.h>

#include "cluster_fake.h"
#include "mql_redis_link.h"
#include "mql_test.h"

#define NCMDS 6

/* A SET's answer: its key, so a reply shows which command it belongs to;
 * node-a sends "ask..." keys on to node-c (a slot being migrated). */
static const char *echo_or_ask(const char *host, const redisReply *cmd, char *out,
                               size_t outlen) {
    const redisReply *key;
    if (strcasecmp(cmd->element[0]->str, "SET") != 0) return NULL;
    key = cmd->element[1];
    if (strcmp(host, "node-a") == 0 && strncmp(key->str, "ask", 3) == 0)
        snprintf(out, outlen, "-ASK %d node-c:7000\r\n", mql_cluster_slot(key->str, key->len));
    else
        snprintf(out, outlen, "$%zu\r\n%s\r\n", key->len, key->str);
    return out;
}

/* A key named prefix{tN} whose slot is the third of the slots numbered third
 * (slots_text's split over three masters). */
static void key_of_third(char *key, size_t len, const char *prefix, int third) {
    int lo = MQL_CLUSTER_SLOTS * third / 3, hi = MQL_CLUSTER_SLOTS * (third + 1) / 3 - 1;
    for (int i = 0;; i++) {
        snprintf(key, len, "%s{t%d}", prefix, i);
        int slot = mql_cluster_slot(key, strlen(key));
        if (slot >= lo && slot <= hi) return;
    }
}

static int reply_is(const redisReply *r, const char *str) {
    return r && r->type == REDIS_REPLY_STRING && strcmp(r->str, str) == 0;
}

static void a_batch_reaches_every_node_each_reply_its_own(void) {
    char abc[3][32] = {"node-a", "node-b", "node-c"};
    char keys[NCMDS][32];
    /* the node of each command: a, b, c, a, a (answers ASK), c */
    const int third[NCMDS] = {0, 1, 2, 0, 0, 2};
    const char *argv[NCMDS][3];
    size_t lens[NCMDS][3];
    mql_redis_argv cmds[NCMDS];
    redisReply *replies[NCMDS];
    mql_result res[NCMDS];
    mql_cluster cl;
    fake f;
    int failed_before = mql_test_failed_checks;
    fake_init(&f);
    fake_set_slots(&f, slots_text(3, abc, NULL));
    f.answer = echo_or_ask;
    f.dead[f.ndead++] = "node-b";   /* gone: connections refused */
    mql_cluster_init(&cl);
    mql_cluster_add_seed(&cl, "seed-1", 7000);
    for (int i = 0; i < NCMDS; i++) {
        char prefix[16];
        snprintf(prefix, sizeof(prefix), "%s%d-", i == 4 ? "ask" : "k", i);
        key_of_third(keys[i], sizeof(keys[i]), prefix, third[i]);
        argv[i][0] = "SET";
        argv[i][1] = keys[i];
        argv[i][2] = "v";
        lens[i][0] = 3;
        lens[i][1] = strlen(keys[i]);
        lens[i][2] = 1;
        cmds[i] = (mql_redis_argv){3, argv[i], lens[i], 1};
    }
    mql_cluster_run_many(&cl, fake_connect, &f, 1000, NCMDS, cmds, replies, res);
    for (int i = 0; i < NCMDS; i++) {
        if (i == 1) continue;
        CHECK(reply_is(replies[i], keys[i]) && res[i].ok);
        if (!replies[i]) fprintf(stderr, "  command %d: %s %s\n", i, res[i].code, res[i].msg);
    }
    CHECK(replies[1] == NULL && strcmp(res[1].code, "UNAVAILABLE") == 0);
    CHECK(strstr(f.cmds, "node-c:ASKING node-c:SET") != NULL);   /* the ASK, followed */
    if (mql_test_failed_checks != failed_before) fprintf(stderr, "  served: %s\n", f.cmds);
    for (int i = 0; i < NCMDS; i++)
        if (replies[i]) freeReplyObject(replies[i]);
    mql_cluster_close(&cl);
    fake_end(&f);
}

int main(void) {
    signal(SIGPIPE, SIG_IGN);   /* a fake node's far end may be gone when written to */
    RUN(a_batch_reaches_every_node_each_reply_its_own);
    return TEST_REPORT("redis_cluster_pipeline");
}
