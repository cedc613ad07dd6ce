/* mql_telemetry_fuzz.c -- a Telemetry frame from the server (Settings and
 * Status), as the client reads it: every duration must come out saturated and
 * non-negative whatever seconds/nanos the bytes hold. */
#include <stdint.h>
#include <stdlib.h>

#include "mql_inbound.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    mql_telemetry_reply r;
    mql_telemetry_decode(&r, data, size);
    if (r.backoff_initial_ms < 0 || r.backoff_max_ms < 0 || r.request_timeout_ms < 0 ||
        r.long_polling_ms < 0 || r.max_body_size < 0)
        abort();
    if (!r.decoded && (r.has_settings || r.has_status)) abort();
    return 0;
}
