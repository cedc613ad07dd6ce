/* mql_body_fuzz.c -- digest check and inflation of a body. Input layout:
 * byte 0 = encoding (low 2 bits) and digest type (next 2 bits), byte 1 =
 * checksum length n, then n bytes of checksum text, then the body. A success
 * must stay within the limit; a failure must leave no buffer behind. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mql_body.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char checksum[256];
    uint8_t *out = NULL;
    size_t n, out_len = 0, max = 256 * 1024;
    mql_body_status st;
    if (size < 2) return 0;
    n = data[1];
    if (size < 2 + n) return 0;
    memcpy(checksum, data + 2, n);
    checksum[n] = '\0';
    st = mql_body_decode(data[0] & 3, (data[0] >> 2) & 3, checksum, data + 2 + n, size - 2 - n, max,
                         &out, &out_len);
    if (st == MQL_BODY_OK ? (!out || out_len > max) : (out != NULL || out_len != 0)) abort();
    free(out);
    return 0;
}
