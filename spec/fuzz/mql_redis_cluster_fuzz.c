/* mql_redis_cluster_fuzz.c -- libFuzzer target for what a Redis Cluster node
 * sends back and mqlease parses: any RESP reply fed to the CLUSTER SLOTS slot
 * map loader, and any error text fed to the MOVED/ASK parser and the slot
 * function. Nothing here may crash, read out of bounds or map a slot to a
 * node that does not exist. */
#include <hiredis/hiredis.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mql_redis_cluster.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* hiredis's reader allocates an array of the announced size as soon as it reads a
 * multi-bulk header ("*327138321\r\n" asks for 2.6 GB), before any element has
 * arrived; its maxelements bound (hiredis 1.0.1, CVE-2021-32765) does not exist in
 * the 0.14 that Debian 12 ships, and its default (2^32 - 1) would not stop this one.
 * That is hiredis's behaviour, not our parser's, so an input announcing more
 * elements than it has bytes is skipped: it cannot be a whole reply anyway. */
static int announces_more_than_it_holds(const uint8_t *data, size_t size) {
    for (size_t i = 0; i < size; i++) {
        if (data[i] != '*' || (i > 0 && data[i - 1] != '\n')) continue;
        unsigned long long n = 0;
        for (size_t j = i + 1; j < size && data[j] >= '0' && data[j] <= '9' && n <= size; j++)
            n = n * 10 + (unsigned long long)(data[j] - '0');
        if (n > size) return 1;
    }
    return 0;
}

static void check_map(const mql_cluster *cl) {
    for (int s = 0; s < MQL_CLUSTER_SLOTS; s++)
        if (cl->slot_node[s] >= cl->nnodes) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static mql_cluster cl;
    if (announces_more_than_it_holds(data, size)) return 0;
    redisReader *reader = redisReaderCreate();
    void *reply = NULL;
    char *text = malloc(size + 1), host[128];
    int slot, port;
    memcpy(text, data, size);
    text[size] = '\0';
    mql_cluster_init(&cl);
    redisReaderFeed(reader, (const char *)data, size);
    if (redisReaderGetReply(reader, &reply) == REDIS_OK && reply) {
        mql_cluster_load_slots(&cl, reply, "seed");
        check_map(&cl);
        freeReplyObject(reply);
    }
    redisReaderFree(reader);
    mql_cluster_close(&cl);
    if (mql_cluster_redirect(text, &slot, host, sizeof(host), &port) &&
        (slot < 0 || slot >= MQL_CLUSTER_SLOTS || port <= 0 || port > 65535))
        abort();
    if (mql_cluster_slot(text, size) >= MQL_CLUSTER_SLOTS) abort();
    free(text);
    return 0;
}
