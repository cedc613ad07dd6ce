/* redis_cluster_test.c -- Redis Cluster routing without a server: CRC16 and
 * slot vectors (from the Redis Cluster specification and CLUSTER KEYSLOT),
 * hash tags, MOVED/ASK parsing, and the slot map read from a CLUSTER SLOTS
 * reply given as RESP text. */
#include <hiredis/hiredis.h>
#include <string.h>

#include "mql_redis_cluster.h"
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
}

static redisReply *parse_resp(const char *text) {
    redisReader *reader = redisReaderCreate();
    void *reply = NULL;
    redisReaderFeed(reader, text, strlen(text));
    if (redisReaderGetReply(reader, &reply) != REDIS_OK) reply = NULL;
    redisReaderFree(reader);
    return reply;
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
    CHECK(mql_cluster_load_slots(&cl, reply) == 16384);
    CHECK(cl.nnodes == 2 && !cl.stale);
    CHECK(cl.nodes[cl.slot_node[0]].port == 16420);
    CHECK(cl.nodes[cl.slot_node[8191]].port == 16420);
    CHECK(cl.nodes[cl.slot_node[8192]].port == 16421);
    CHECK(cl.nodes[cl.slot_node[slot_of("foo")]].port == 16421);
    CHECK(mql_cluster_node_index(&cl, "127.0.0.1", 16421) == cl.slot_node[16383]);
    freeReplyObject(reply);
    reply = parse_resp("*1\r\n*2\r\n:0\r\n:5\r\n");   /* malformed: no master */
    CHECK(mql_cluster_load_slots(&cl, reply) == 0);
    CHECK(cl.stale && cl.slot_node[0] == -1);
    freeReplyObject(reply);
    mql_cluster_close(&cl);
}

int main(void) {
    RUN(crc16_matches_the_cluster_spec_vector);
    RUN(slots_match_cluster_keyslot);
    RUN(hash_tags_pick_the_hashed_part);
    RUN(parses_moved_and_ask);
    RUN(loads_the_slot_map_from_cluster_slots);
    return TEST_REPORT("redis_cluster_test");
}
