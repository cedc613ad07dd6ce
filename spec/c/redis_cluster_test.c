/* redis_cluster_test.c -- Redis Cluster routing without a server: CRC16 and
 * slot vectors (from the Redis Cluster specification and CLUSTER KEYSLOT),
 * hash tags, MOVED/ASK parsing, the slot map read from a CLUSTER SLOTS reply
 * given as RESP text, the node table following the addresses those replies
 * name, and which nodes a refresh asks, through fake nodes on socketpairs. */
#include <signal.h>

#include "cluster_fake.h"
#include "mql_test.h"

static int slot_of(const char *key) {
    return mql_cluster_slot(key, strlen(key));
}

static void crc16_matches_the_cluster_spec_vector(void) {
    CHECK(mql_crc16("123456789", 9) == 0x31C3);
    CHECK(mql_crc16("", 0) == 0);
}

static void slots_match_cluster_keyslot(void) {
    CHECK(slot_of("foo") == 12182);
    CHECK(slot_of("bar") == 5061);
    CHECK(slot_of("hello") == 866);
}

static void hash_tags_pick_the_hashed_part(void) {
    CHECK(slot_of("{user1000}.following") == slot_of("user1000"));
    CHECK(slot_of("{user1000}.followers") == slot_of("user1000"));
    CHECK(slot_of("foo{}{bar}") == mql_crc16("foo{}{bar}", 10) % 16384);   /* empty tag: whole key */
    CHECK(slot_of("foo{{bar}}zap") == slot_of("{bar"));                    /* up to the first '}' */
    CHECK(slot_of("foo{bar}{zap}") == slot_of("bar"));                     /* only the first tag */
    CHECK(slot_of("mqlease:{m1}:done") == slot_of("mqlease:{m1}:lock"));
    CHECK(slot_of("mqlease:{m1}:lock") == slot_of("mqlease:{m1}:fence"));
    CHECK(slot_of("nobrace}{") == mql_crc16("nobrace}{", 9) % 16384);      /* no closing brace after '{' */
}

static void parses_moved_and_ask(void) {
    char host[64];
    int slot = -1, port = -1;
    CHECK(mql_cluster_redirect("MOVED 3999 127.0.0.1:6381", &slot, host, sizeof(host), &port) == 1);
    CHECK(slot == 3999 && port == 6381 && strcmp(host, "127.0.0.1") == 0);
    CHECK(mql_cluster_redirect("ASK 12182 ::1:7002", &slot, host, sizeof(host), &port) == 2);
    CHECK(slot == 12182 && port == 7002 && strcmp(host, "::1") == 0);
    CHECK(mql_cluster_redirect("MOVED 1 :7000", &slot, host, sizeof(host), &port) == 1);
    CHECK(host[0] == '\0' && port == 7000);
    CHECK(mql_cluster_redirect("ERR wrong", &slot, host, sizeof(host), &port) == 0);
    CHECK(mql_cluster_redirect("MOVED 99999 h:1", &slot, host, sizeof(host), &port) == 0);
    CHECK(mql_cluster_redirect("MOVED 5 h:0", &slot, host, sizeof(host), &port) == 0);
    CHECK(mql_cluster_redirect("MOVED 5 hostonly", &slot, host, sizeof(host), &port) == 0);
    CHECK(mql_cluster_redirect("ASK 5 ?:7000", &slot, host, sizeof(host), &port) == 0);   /* no known node */
}

static void loads_the_slot_map_from_cluster_slots(void) {
    /* two masters, the second with a replica */
    redisReply *reply = parse_resp(
        "*2\r\n"
        "*3\r\n:0\r\n:8191\r\n*3\r\n$9\r\n127.0.0.1\r\n:16420\r\n$2\r\nid\r\n"
        "*4\r\n:8192\r\n:16383\r\n*3\r\n$9\r\n127.0.0.1\r\n:16421\r\n$2\r\nid\r\n"
        "*3\r\n$9\r\n127.0.0.1\r\n:16424\r\n$2\r\nid\r\n");
    mql_cluster cl;
    mql_cluster_init(&cl);
    CHECK(reply != NULL);
    CHECK(mql_cluster_load_slots(&cl, reply, "seed") == 16384);
    CHECK(cl.nnodes == 3 && !cl.stale);   /* the two masters, then the replica */
    CHECK(cl.nodes[2].port == 16424);
    CHECK(cl.nodes[cl.slot_node[0]].port == 16420);
    CHECK(cl.nodes[cl.slot_node[8191]].port == 16420);
    CHECK(cl.nodes[cl.slot_node[8192]].port == 16421);
    CHECK(cl.nodes[cl.slot_node[slot_of("foo")]].port == 16421);
    CHECK(mql_cluster_node_index(&cl, "127.0.0.1", 16421) == cl.slot_node[16383]);
    freeReplyObject(reply);
    reply = parse_resp("*1\r\n*2\r\n:0\r\n:5\r\n");   /* malformed: no master */
    CHECK(mql_cluster_load_slots(&cl, reply, "seed") == 0);
    CHECK(cl.stale && cl.slot_node[0] == -1);
    freeReplyObject(reply);
    mql_cluster_close(&cl);
}

/* ------------------------------------------------------------ a changing topology */

static int in_table(const mql_cluster *cl, const char *host) {
    for (int i = 0; i < cl->nnodes; i++)
        if (strcmp(cl->nodes[i].host, host) == 0) return 1;
    return 0;
}

static void the_node_table_follows_the_addresses_cluster_slots_names(void) {
    /* pods replaced 40 times, each time all six at new addresses: 240 in all */
    mql_cluster cl;
    char master[3][32], replica[3][32], old[3][32];
    int gen, i, first, last, covered_every_time = 1, only_named = 1, old_gone = 1;
    mql_cluster_init(&cl);
    CHECK(mql_cluster_add_seed(&cl, "seed.example", 7000) == 0);
    for (gen = 0; gen < 40; gen++) {
        redisReply *reply;
        char *resp;
        for (i = 0; i < 3; i++) {
            snprintf(master[i], sizeof(master[i]), "10.0.%d.%d", gen, i + 1);
            snprintf(replica[i], sizeof(replica[i]), "10.1.%d.%d", gen, i + 1);
        }
        resp = slots_text(3, master, replica);
        reply = parse_resp(resp);
        if (mql_cluster_load_slots(&cl, reply, "seed") != MQL_CLUSTER_SLOTS) covered_every_time = 0;
        if (cl.nnodes != 6) only_named = 0;
        for (i = 0; i < 3; i++)
            if (gen > 0 && in_table(&cl, old[i])) old_gone = 0;
        first = cl.slot_node[0];
        last = cl.slot_node[MQL_CLUSTER_SLOTS - 1];
        if (first < 0 || last < 0 || strcmp(cl.nodes[first].host, master[0]) != 0 ||
            strcmp(cl.nodes[last].host, master[2]) != 0)
            covered_every_time = 0;
        memcpy(old, master, sizeof(old));
        freeReplyObject(reply);
        free(resp);
    }
    CHECK(covered_every_time);   /* new masters are always taken in */
    CHECK(only_named);           /* three masters and their replicas, nothing else */
    CHECK(old_gone);             /* the replaced ones are gone */
    CHECK(!in_table(&cl, "seed.example") && cl.nseeds == 1);   /* the seed stays apart */
    mql_cluster_close(&cl);
}

static void a_cluster_of_a_hundred_masters_is_mapped_whole(void) {
    char (*master)[32] = calloc(100, sizeof(*master));
    mql_cluster cl;
    redisReply *reply;
    char *resp;
    int i, right = 1;
    for (i = 0; i < 100; i++) snprintf(master[i], sizeof(master[i]), "node-%d", i);
    resp = slots_text(100, master, NULL);
    reply = parse_resp(resp);
    mql_cluster_init(&cl);
    CHECK(mql_cluster_load_slots(&cl, reply, "seed") == MQL_CLUSTER_SLOTS);
    CHECK(cl.nnodes == 100);
    for (i = 0; i < 100; i++)
        if (cl.slot_node[MQL_CLUSTER_SLOTS * i / 100] < 0 ||
            strcmp(cl.nodes[cl.slot_node[MQL_CLUSTER_SLOTS * i / 100]].host, master[i]) != 0)
            right = 0;
    CHECK(right);
    mql_cluster_close(&cl);
    freeReplyObject(reply);
    free(resp);
    free(master);
}

static void a_refresh_asks_the_named_nodes_before_the_seeds(void) {
    fake f;
    mql_cluster cl;
    mql_result res;
    redisReply *reply;
    char abc[3][32] = {"node-a", "node-b", "node-c"}, dbc[3][32] = {"node-d", "node-b", "node-c"};
    fake_init(&f);
    fake_set_slots(&f, slots_text(3, abc, NULL));
    f.dead[f.ndead++] = "seed-1";   /* a seed that is gone for good */
    mql_cluster_init(&cl);
    mql_cluster_add_seed(&cl, "seed-1", 7000);
    mql_cluster_add_seed(&cl, "seed-2", 7000);
    /* "hello" is slot 866: node-a's, then node-d's */
    reply = run_set(&cl, &f, "hello", &res);
    CHECK(reply && reply->type == REDIS_REPLY_STATUS);
    CHECK(strcmp(f.log, "seed-1 seed-2 node-a ") == 0);   /* the seeds know the way in */
    freeReplyObject(reply);
    /* node-a's pod is replaced: its slots move to node-d, seed-2 goes too */
    fake_kill(&f, "node-a");
    fake_kill(&f, "seed-2");
    fake_set_slots(&f, slots_text(3, dbc, NULL));
    reply = run_set(&cl, &f, "hello", &res);
    CHECK(reply == NULL && !res.ok);   /* the write may have run: never sent again */
    reply = run_set(&cl, &f, "hello", &res);
    CHECK(reply && reply->type == REDIS_REPLY_STATUS);
    /* the refresh asked the nodes CLUSTER SLOTS named, never a seed */
    fprintf(stderr, "  refresh after the move connected: %s\n", f.log);
    CHECK(strcmp(f.log, "node-a node-b node-d ") == 0);
    CHECK(in_table(&cl, "node-d") && !in_table(&cl, "node-a") && cl.nnodes == 3);
    if (reply) freeReplyObject(reply);
    mql_cluster_close(&cl);   /* the far ends read EOF: the threads end */
    fake_end(&f);
}

/* A refresh of the slot map that met a node it could not ask (a dead seed,
 * a dead master still named) and then read the map from another: the command
 * that then ran and was answered is a success, not the failure of the node
 * asked first. Reported failed, a write that ran looked like one that may not
 * have (an acquire that took its lock held its message until the lock
 * lapsed; a caller's INCR was retried and counted twice). */
static void a_command_answered_after_a_refresh_past_a_dead_node_is_ok(void) {
    fake f;
    mql_cluster cl;
    mql_result res;
    redisReply *reply;
    char abc[3][32] = {"node-a", "node-b", "node-c"}, dbc[3][32] = {"node-d", "node-b", "node-c"};
    fake_init(&f);
    fake_set_slots(&f, slots_text(3, abc, NULL));
    f.dead[f.ndead++] = "seed-1";   /* the first seed is down when the client starts */
    mql_cluster_init(&cl);
    mql_cluster_add_seed(&cl, "seed-1", 7000);
    mql_cluster_add_seed(&cl, "seed-2", 7000);
    reply = run_set(&cl, &f, "hello", &res);
    CHECK(reply && reply->type == REDIS_REPLY_STATUS);
    CHECK(res.ok);
    if (!res.ok) fprintf(stderr, "  first command: %s %s\n", res.code, res.msg);
    if (reply) freeReplyObject(reply);
    /* node-a dies: the map is read again, node-a (named, not connected) first */
    fake_kill(&f, "node-a");
    fake_set_slots(&f, slots_text(3, dbc, NULL));
    reply = run_set(&cl, &f, "hello", &res);
    CHECK(reply == NULL && !res.ok);   /* cut: the write may have run */
    reply = run_set(&cl, &f, "hello", &res);
    CHECK(reply && reply->type == REDIS_REPLY_STATUS);
    CHECK(res.ok);
    if (!res.ok) fprintf(stderr, "  after the refresh: %s %s\n", res.code, res.msg);
    if (reply) freeReplyObject(reply);
    mql_cluster_close(&cl);
    fake_end(&f);
}

/* A node that answers a command twice: the spare reply must never be taken
 * for the next command's on that connection (it is made again instead). */
static void a_spare_reply_of_a_node_is_never_taken_for_a_later_command(void) {
    fake f;
    mql_cluster cl;
    mql_result res;
    char one[1][32] = {"twice-a"};
    fake_init(&f);
    fake_set_slots(&f, slots_text(1, one, NULL));
    mql_cluster_init(&cl);
    mql_cluster_add_seed(&cl, "twice-a", 7000);
    for (int i = 0; i < 3; i++) {
        char v[16];
        const char *argv[3] = {"SET", "k", v};
        size_t lens[3] = {3, 1, 0};
        redisReply *reply;
        lens[2] = (size_t)snprintf(v, sizeof(v), "v%d", i);
        reply = mql_cluster_run(&cl, fake_connect, &f, 3, argv, lens, 1, &res);
        CHECK(reply && reply->type == REDIS_REPLY_STRING && strcmp(reply->str, v) == 0);
        if (reply) freeReplyObject(reply);
    }
    mql_cluster_close(&cl);
    fake_end(&f);
}

int main(void) {
    signal(SIGPIPE, SIG_IGN);   /* a fake node's far end may be gone when written to */
    RUN(crc16_matches_the_cluster_spec_vector);
    RUN(slots_match_cluster_keyslot);
    RUN(hash_tags_pick_the_hashed_part);
    RUN(parses_moved_and_ask);
    RUN(loads_the_slot_map_from_cluster_slots);
    RUN(the_node_table_follows_the_addresses_cluster_slots_names);
    RUN(a_cluster_of_a_hundred_masters_is_mapped_whole);
    RUN(a_refresh_asks_the_named_nodes_before_the_seeds);
    RUN(a_spare_reply_of_a_node_is_never_taken_for_a_later_command);
    RUN(a_command_answered_after_a_refresh_past_a_dead_node_is_ok);
    return TEST_REPORT("redis_cluster_test");
}
