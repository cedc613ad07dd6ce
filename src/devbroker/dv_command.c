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

static const struct {
    const char *key;
    kind k;
    size_t off;
} numeric[] = {
    {"fail_change", SHARE, offsetof(dv_faults, fail_change)},
    {"fail_ack", SHARE, offsetof(dv_faults, fail_ack)},
    {"gzip", SHARE, offsetof(dv_faults, gzip)},
    {"corrupt_digest", SHARE, offsetof(dv_faults, corrupt_digest)},
    {"bomb", SHARE, offsetof(dv_faults, bomb)},
    {"malformed", SHARE, offsetof(dv_faults, malformed)},
    {"truncated_frame", SHARE, offsetof(dv_faults, truncated_frame)},
    {"delay_change_ms", MS, offsetof(dv_faults, delay_change_ms)},
    {"delay_send_ms", MS, offsetof(dv_faults, delay_send_ms)},
    {"min_invisible_ms", MS, offsetof(dv_faults, min_invisible_ms)},
    {"control_timeout_ms", MS, offsetof(dv_faults, control_timeout_ms)},
    {"max_renewals", INT, offsetof(dv_faults, max_renewals)},
    {"tx_check_ms", MS, offsetof(dv_faults, tx_check_ms)},
    {"tx_check_interval_ms", MS, offsetof(dv_faults, tx_check_interval_ms)},
    {"tx_check_max", INT, offsetof(dv_faults, tx_check_max)},
    {"drop_end_transaction", SHARE, offsetof(dv_faults, drop_end_transaction)},
    {"paused", FLAG, offsetof(dv_faults, paused)},
    {"time_scale", SCALE, offsetof(dv_faults, time_scale)},
};

static const struct {
    const char *key, *names[4];
    size_t off;
} named[] = {
    {"digest", {"md5", "crc32", "sha1", NULL}, offsetof(dv_faults, digest)},
    {"gzip_framing", {"zlib", "gzip", NULL, NULL}, offsetof(dv_faults, gzip_framing)},
    {"malformed_kind", {"any", "id", "handle", "topic"}, offsetof(dv_faults, malformed_kind)},
};

static int set_numeric(dv_faults *f, kind k, size_t off, const char *value) {
    char *base = (char *)f + off;
    double v;
    switch (k) {
    case SHARE:
        if (number(value, 0, 1, &v) < 0) return -1;
        *(double *)base = v;
        return 0;
    case SCALE:
        if (number(value, 1e-6, 1e6, &v) < 0) return -1;
        *(double *)base = v;
        return 0;
    case MS:   /* up to a day, whole: a cast would store 0 for "0.9" and answer ok */
        if (number(value, 0, 86400000, &v) < 0 || v != floor(v)) return -1;
        *(int64_t *)base = (int64_t)v;
        return 0;
    case INT:   /* whole: a cast would store 1 for "1.5", and 0 (no renewal) for "-0.5" */
        if (number(value, -1, 1000000, &v) < 0 || v != floor(v)) return -1;
        *(int *)base = (int)v;
        return 0;
    case FLAG:
        if (number(value, 0, 1, &v) < 0 || (v != 0 && v != 1)) return -1;
        *(int *)base = (int)v;
        return 0;
    }
    return -1;
}

int dv_faults_set(dv_faults *f, const char *key, const char *value, char *err, size_t errlen) {
    size_t i, j;
    for (i = 0; i < sizeof(numeric) / sizeof(numeric[0]); i++) {
        if (strcmp(key, numeric[i].key) != 0) continue;
        if (set_numeric(f, numeric[i].k, numeric[i].off, value) == 0) return 0;
        snprintf(err, errlen, "bad value for '%s': '%.64s'", key, value);
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
        snprintf(err, errlen, "bad value for '%s': '%.64s'", key, value);
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
