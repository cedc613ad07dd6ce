/* dv_command.c -- settings and control lines, parsed without trusting them
 * (see dv_command.h). Numbers are read with strtod/strtoll and range-checked
 * before any conversion, so no input can overflow a conversion. */
#include "dv_command.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void dv_faults_init(dv_faults *f) {
    memset(f, 0, sizeof(*f));
    f->max_renewals = -1;
    f->min_invisible_ms = 10000;
    f->time_scale = 1.0;
    f->control_timeout_ms = 30000;
    f->tx_check_ms = 6000;
    f->tx_check_interval_ms = 5000;
    f->tx_check_max = 15;
}

static int number(const char *text, double lo, double hi, double *out) {
    char *end;
    double v;
    errno = 0;
    v = strtod(text, &end);
    if (end == text || *end || errno || !isfinite(v) || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

typedef enum kind { SHARE, MS, INT, SCALE, FLAG } kind;

#define DAY_MS 86400000
#define MAX_INVISIBLE_MS 43200000   /* the most a receive may ask for (dv_handlers.c) */

/* Each setting's own range: a value outside it is refused, never clamped. */
static const struct {
    const char *key;
    kind k;
    double lo, hi;
    size_t off;
} numeric[] = {
    {"fail_change", SHARE, 0, 1, offsetof(dv_faults, fail_change)},
    {"fail_ack", SHARE, 0, 1, offsetof(dv_faults, fail_ack)},
    {"gzip", SHARE, 0, 1, offsetof(dv_faults, gzip)},
    {"corrupt_digest", SHARE, 0, 1, offsetof(dv_faults, corrupt_digest)},
    {"bomb", SHARE, 0, 1, offsetof(dv_faults, bomb)},
    {"malformed", SHARE, 0, 1, offsetof(dv_faults, malformed)},
    {"truncated_frame", SHARE, 0, 1, offsetof(dv_faults, truncated_frame)},
    {"delay_change_ms", MS, 0, DAY_MS, offsetof(dv_faults, delay_change_ms)},
    {"delay_send_ms", MS, 0, DAY_MS, offsetof(dv_faults, delay_send_ms)},
    /* past the longest invisible duration a receive may ask for, none could */
    {"min_invisible_ms", MS, 0, MAX_INVISIBLE_MS, offsetof(dv_faults, min_invisible_ms)},
    /* a client is dropped once silent this long: at 0 every client, the one
     * that set it too, would be dropped as it connects, and nothing could set
     * it back; 100 ms leaves a client on a loaded host time for its next line */
    {"control_timeout_ms", MS, 100, DAY_MS, offsetof(dv_faults, control_timeout_ms)},
    {"max_renewals", INT, -1, 1000000, offsetof(dv_faults, max_renewals)},   /* -1: no cap */
    {"tx_check_ms", MS, 0, DAY_MS, offsetof(dv_faults, tx_check_ms)},
    {"tx_check_interval_ms", MS, 0, DAY_MS, offsetof(dv_faults, tx_check_interval_ms)},
    /* 0: dropped unasked at its first check (TransactionalMessageServiceImpl.needDiscard) */
    {"tx_check_max", INT, 0, 1000000, offsetof(dv_faults, tx_check_max)},
    {"drop_end_transaction", SHARE, 0, 1, offsetof(dv_faults, drop_end_transaction)},
    {"paused", FLAG, 0, 1, offsetof(dv_faults, paused)},
    {"time_scale", SCALE, 1e-6, 1e6, offsetof(dv_faults, time_scale)},
};

static const struct {
    const char *key, *names[4];
    const char *says;
    size_t off;
} named[] = {
    {"digest", {"md5", "crc32", "sha1", NULL}, "md5, crc32 or sha1", offsetof(dv_faults, digest)},
    {"gzip_framing", {"zlib", "gzip", NULL, NULL}, "zlib or gzip", offsetof(dv_faults, gzip_framing)},
    {"malformed_kind", {"any", "id", "handle", "topic"}, "any, id, handle or topic",
     offsetof(dv_faults, malformed_kind)},
};

/* Stores value in f at off if it is a number of kind k within [lo, hi]. */
static int set_numeric(dv_faults *f, kind k, double lo, double hi, size_t off, const char *value) {
    char *base = (char *)f + off;
    double v;
    if (number(value, lo, hi, &v) < 0) return -1;
    /* whole where whole is asked: a cast would store 0 for "0.9" ms and answer ok,
     * 1 for a count of "1.5", and 0 (no renewal) for "-0.5" */
    if (k != SHARE && k != SCALE && v != floor(v)) return -1;
    switch (k) {
    case SHARE:
    case SCALE:
        *(double *)base = v;
        return 0;
    case MS:
        *(int64_t *)base = (int64_t)v;
        return 0;
    case INT:
    case FLAG:
        *(int *)base = (int)v;
        return 0;
    }
    return -1;
}

/* What a numeric setting takes, for its refusal. */
static void range_text(kind k, double lo, double hi, char *out, size_t outlen) {
    switch (k) {
    case SHARE: snprintf(out, outlen, "a share from %g to %g", lo, hi); break;
    case SCALE: snprintf(out, outlen, "a factor from %g to %g", lo, hi); break;
    case MS: snprintf(out, outlen, "whole milliseconds from %.0f to %.0f", lo, hi); break;
    case INT: snprintf(out, outlen, "a whole number from %.0f to %.0f", lo, hi); break;
    case FLAG: snprintf(out, outlen, "%.0f or %.0f", lo, hi); break;
    }
}

int dv_faults_set(dv_faults *f, const char *key, const char *value, char *err, size_t errlen) {
    char range[64];
    size_t i, j;
    for (i = 0; i < sizeof(numeric) / sizeof(numeric[0]); i++) {
        if (strcmp(key, numeric[i].key) != 0) continue;
        if (set_numeric(f, numeric[i].k, numeric[i].lo, numeric[i].hi, numeric[i].off, value) == 0)
            return 0;
        range_text(numeric[i].k, numeric[i].lo, numeric[i].hi, range, sizeof(range));
        snprintf(err, errlen, "bad value for '%s': '%.64s' (%s)", key, value, range);
        return -1;
    }
    for (i = 0; i < sizeof(named) / sizeof(named[0]); i++) {
        if (strcmp(key, named[i].key) != 0) continue;
        for (j = 0; j < 4 && named[i].names[j]; j++) {
            if (strcmp(value, named[i].names[j]) == 0) {
                *(int *)((char *)f + named[i].off) = (int)j;
                return 0;
            }
        }
        snprintf(err, errlen, "bad value for '%s': '%.64s' (%s)", key, value, named[i].says);
        return -1;
    }
    snprintf(err, errlen, "unknown setting '%.64s'", key);
    return -1;
}

/* Splits line into at most 4 words; returns how many (5 = too many). */
static int words(const char *line, char w[4][128]) {
    int n = 0;
    const char *p = line;
    for (;;) {
        size_t len;
        while (*p == ' ' || *p == '\t') p++;
        if (!*p) return n;
        len = strcspn(p, " \t");
        if (n == 4 || len >= 128) return 5;
        memcpy(w[n], p, len);
        w[n][len] = '\0';
        n++;
        p += len;
    }
}

int dv_command_parse(const char *line, dv_command *cmd, char *err, size_t errlen) {
    char w[4][128];
    int n = words(line, w);
    double d;
    memset(cmd, 0, sizeof(*cmd));
    if (n >= 1 && n <= 4) snprintf(cmd->name, sizeof(cmd->name), "%s", n >= 2 ? w[1] : "");
    if (n == 2 && strcmp(w[0], "topic") == 0) {
        cmd->kind = DV_CMD_TOPIC;
    } else if ((n == 2 || n == 3) && strcmp(w[0], "publish") == 0) {
        cmd->kind = DV_CMD_PUBLISH;
        if (n == 3 && number(w[2], 0, 86400000, &d) < 0) {
            snprintf(err, errlen, "publish: bad delay '%.64s' (ms, 0 to a day)", w[2]);
            return -1;
        }
        cmd->delay_ms = n == 3 ? (int64_t)d : 0;
    } else if (n == 3 && strcmp(w[0], "set") == 0 && strlen(w[2]) < sizeof(cmd->value)) {
        cmd->kind = DV_CMD_SET;
        snprintf(cmd->value, sizeof(cmd->value), "%s", w[2]);
    } else if (n == 1 && strcmp(w[0], "drop_streams") == 0) {
        cmd->kind = DV_CMD_DROP_STREAMS;
    } else if (n == 1 && strcmp(w[0], "reconnect") == 0) {
        cmd->kind = DV_CMD_RECONNECT;
    } else if (n == 1 && strcmp(w[0], "stats") == 0) {
        cmd->kind = DV_CMD_STATS;
    } else if (n >= 1 && n <= 4 && strcmp(w[0], "set") == 0) {
        snprintf(err, errlen, "usage: set KEY VALUE");
        return -1;
    } else {
        snprintf(err, errlen, "unknown command (topic, publish, set, drop_streams, reconnect, stats)");
        return -1;
    }
    return 0;
}
