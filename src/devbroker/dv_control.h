/* dv_control.h -- the dev broker's control port: one text command per line.
 *
 *   topic NAME                 create a topic
 *   set fail_change P          share (0..1) of renewals answered INTERNAL_SERVER_ERROR
 *   set fail_ack P             share (0..1) of ack entries answered INTERNAL_SERVER_ERROR
 *   set delay_change_ms N      answer every renewal N ms late
 *   set max_renewals N         renewals per delivery before they fail (-1: no cap)
 *   set paused 0|1             hold every answer (a partition)
 *   set time_scale F           invisible durations last F times what is asked (0.1: 10 s -> 1 s)
 *   drop_streams               cancel the receive streams in flight
 *   stats                      one line of counters
 *
 * Each command is answered with one line, "ok ..." or "error ...".
 */
#ifndef DV_CONTROL_H
#define DV_CONTROL_H

#include "dv_server.h"

typedef struct dv_control dv_control;

/* Listens on host:port (port 0 picks one, written to *port). NULL on failure. */
dv_control *dv_control_start(dv_server *s, const char *listen, int *port);
void dv_control_stop(dv_control *c);
/* Applies one command line; writes the answer to out. Used by the flags too. */
void dv_control_apply(dv_server *s, const char *line, char *out, size_t outlen);

#endif /* DV_CONTROL_H */
