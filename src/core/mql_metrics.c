/* mql_metrics.c -- counters and histograms (see mql_metrics.h). */
#include "mql_metrics.h"

#include <stdio.h>
#include <string.h>

const double mql_hist_bounds[MQL_HIST_BUCKETS] = {
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1, 2.5, 5, 10, 30, 60, 300, 3600};

void mql_hist_observe(mql_hist *h, double seconds) {
    int i = 0;
    while (i < MQL_HIST_BUCKETS && seconds > mql_hist_bounds[i]) i++;
    h->counts[i]++;
    h->count++;
    h->sum += seconds;
}

void mql_metrics_error(mql_metrics *m, const char *op, const char *code) {
    int i;
    for (i = 0; i < m->nerrors; i++) {
        if (strcmp(m->errors[i].op, op) == 0 && strcmp(m->errors[i].code, code) == 0) {
            m->errors[i].n++;
            return;
        }
    }
    /* The last slot is kept for {any, OTHER}: once the others are taken, every
     * new kind is counted there, and no kind already listed loses its name. */
    if (m->nerrors >= MQL_MAX_ERROR_KINDS - 1) {
        i = MQL_MAX_ERROR_KINDS - 1;
        if (m->nerrors < MQL_MAX_ERROR_KINDS) {
            m->nerrors = MQL_MAX_ERROR_KINDS;
            snprintf(m->errors[i].op, sizeof(m->errors[i].op), "%s", "any");
            snprintf(m->errors[i].code, sizeof(m->errors[i].code), "%s", "OTHER");
            m->errors[i].n = 0;
        }
        m->errors[i].n++;
        return;
    }
    i = m->nerrors++;
    snprintf(m->errors[i].op, sizeof(m->errors[i].op), "%s", op);
    snprintf(m->errors[i].code, sizeof(m->errors[i].code), "%s", code);
    m->errors[i].n = 1;
}

static int reason_find(const mql_reason_table *t, const char *reason) {
    int i;
    for (i = 0; i < t->n; i++)
        if (strcmp(t->r[i].reason, reason) == 0) return i;
    return -1;
}

/* As the error table: the last slot is kept for "other", so no reason a
 * scrape has shown is ever renamed (its counter would go down and "other"
 * jump). A reason spelt "other" (a host's dead-letter reason may be anything)
 * is that same slot: one series per label. */
void mql_metrics_reason(mql_reason_table *t, const char *reason) {
    int i = reason_find(t, reason);
    if (i < 0 && t->n < MQL_MAX_REASONS - 1) {
        i = t->n++;
        snprintf(t->r[i].reason, sizeof(t->r[i].reason), "%s", reason);
        t->r[i].n = 0;
    } else if (i < 0 && (i = reason_find(t, "other")) < 0) {
        i = t->n++;   /* the last slot */
        snprintf(t->r[i].reason, sizeof(t->r[i].reason), "%s", "other");
        t->r[i].n = 0;
    }
    t->r[i].n++;
}
