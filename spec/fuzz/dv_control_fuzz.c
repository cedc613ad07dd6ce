/* dv_control_fuzz.c -- libFuzzer target: the dev broker's control-port parser.
 *
 * The input is text, one command per line, as a control client sends it. Each
 * line goes through dv_command_parse; a `set` through dv_faults_set, after
 * which every setting must still be in range (else abort: the fuzzer reports
 * it); a `publish` builds its message. The settings reached are then used to
 * write one delivery (dv_wire_delivery), bombs aside (65 MiB each: too slow
 * for a fuzzer, and the same code as gzip).
 *
 *   make fuzz   (or by hand: clang -fsanitize=fuzzer,address,undefined ... the
 *               dev broker's files but dv_main.c)
 * Seeds: spec/fuzz/corpus/dv_control/.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "apache/rocketmq/v2/service.pb-c.h"
#include "dv_command.h"
#include "dv_wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_ranges(const dv_faults *f) {
    const double shares[] = {f->fail_change, f->fail_ack, f->gzip, f->corrupt_digest,
                             f->bomb, f->malformed, f->truncated_frame};
    size_t i;
    for (i = 0; i < sizeof(shares) / sizeof(shares[0]); i++)
        if (!(shares[i] >= 0 && shares[i] <= 1)) abort();
    if (!(f->time_scale > 0) || f->delay_change_ms < 0 || f->min_invisible_ms < 0 ||
        f->min_invisible_ms > 43200000 || f->control_timeout_ms < 100 || f->max_renewals < -1 ||
        f->tx_check_max < 0 || f->paused < 0 || f->paused > 1 || f->gzip_framing < 0 ||
        f->gzip_framing > 1 || f->digest > DV_DIGEST_SHA1 || f->malformed_kind > DV_MALFORMED_TOPIC)
        abort();
}

static void deliver_one(const dv_faults *f) {
    dv_faults g = *f;
    size_t n, len;
    unsigned seed = 1;
    dv_wire_stats st;
    uint8_t *msg = dv_wire_full_message("t", "id", 1700000000000LL, 1700000000000LL, &n);
    uint8_t *out;
    dv_delivery d;
    memset(&st, 0, sizeof(st));
    memset(&d, 0, sizeof(d));
    g.bomb = 0;
    d.wire = msg;
    d.wire_len = n;
    d.handle = "dv 0 0 0 1 1";
    d.store_host = "127.0.0.1:1";
    out = dv_wire_delivery(&d, &g, &seed, &len, &st);
    if (!out) abort();   /* a message we packed ourselves must decode */
    free(out);
    free(msg);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1), *line, *save = NULL;
    dv_faults f;
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    dv_faults_init(&f);
    for (line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        dv_command cmd;
        char err[160];
        if (dv_command_parse(line, &cmd, err, sizeof(err)) < 0) continue;
        if (cmd.kind == DV_CMD_SET) {
            dv_faults_set(&f, cmd.name, cmd.value, err, sizeof(err));
            check_ranges(&f);
        } else if (cmd.kind == DV_CMD_PUBLISH) {
            size_t n;
            uint8_t *m = dv_wire_full_message(cmd.name, "id", 0, cmd.delay_ms, &n);
            Apache__Rocketmq__V2__Message *back = (void *)protobuf_c_message_unpack(
                &apache__rocketmq__v2__message__descriptor, NULL, n, m);
            if (!back) abort();
            protobuf_c_message_free_unpacked(&back->base, NULL);
            free(m);
        }
    }
    deliver_one(&f);
    free(text);
    return 0;
}
