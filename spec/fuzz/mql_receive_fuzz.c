/* mql_receive_fuzz.c -- one ReceiveMessage response frame, as the client judges
 * it: decode, copy into a message, check identity, verify the digest, inflate.
 * Whatever the bytes, the verdict must be one of the five kinds and keep its
 * promises (a good message has an id, a handle and a body; a corrupted one has
 * no body). The inflation limit is small so bombs are found fast. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mql_inbound.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    mql_frame f;
    mql_frame_decode(&f, data, size, 1 << 20);
    switch (f.kind) {
    case MQL_FRAME_MESSAGE:
        if (!f.msg.id || !*f.msg.id || !f.msg.receipt_handle || !f.msg.topic || !*f.msg.topic ||
            !f.msg.body || f.msg.body_len > (1 << 20))
            abort();
        break;
    case MQL_FRAME_CORRUPTED:
        if (f.msg.body || !f.reason || !f.msg.receipt_handle) abort();
        break;
    case MQL_FRAME_MALFORMED:
        if (!f.reason) abort();
        break;
    case MQL_FRAME_STATUS:
    case MQL_FRAME_OTHER:
        break;
    default:
        abort();
    }
    mql_frame_clear(&f);
    return 0;
}
