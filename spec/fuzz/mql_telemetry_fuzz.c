/* mql_telemetry_fuzz.c -- a Telemetry frame from the server (Settings,
 * Status, RecoverOrphanedTransactionCommand), as the client reads it: every
 * duration must come out saturated and non-negative whatever seconds/nanos the
 * bytes hold, and an orphan is whole (id, topic, transaction id) or absent. */
#include <stdint.h>
#include <stdlib.h>

#include "mql_inbound.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    mql_telemetry_reply r;
    mql_telemetry_decode(&r, data, size, 1 << 16);
    if (r.backoff_initial_ms < 0 || r.backoff_max_ms < 0 || r.request_timeout_ms < 0 ||
        r.long_polling_ms < 0 || r.max_body_size < 0)
        abort();
    if (!r.decoded && (r.has_settings || r.has_status || r.has_orphan)) abort();
    if (r.has_orphan && (!r.orphan.id || !r.orphan.topic || !r.orphan_transaction_id)) abort();
    if (r.has_orphan && r.orphan_bad) abort();
    mql_telemetry_clear(&r);
    return 0;
}
