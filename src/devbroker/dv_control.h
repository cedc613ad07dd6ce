/* dv_control.h -- the dev broker's control port: one text command per line,
 * each answered with one line, "ok ..." or "error ...". The commands are in
 * dv_command.h; the settings in dv_faults (dv_command.h) and README.
 *
 * Anyone who reaches the port may pause the broker or fail its calls: it
 * binds loopback only unless the operator passes --control-any.
 *
 * Several clients at once; a client silent for control_timeout_ms (30 s by
 * default) is dropped; dv_control_stop returns at once whatever the clients do.
 */
#ifndef DV_CONTROL_H
#define DV_CONTROL_H

#include "dv_server.h"

typedef struct dv_control dv_control;

/* Listens on host:port (port 0 picks one, written to *port). The port has no
 * authentication, so host must be a loopback address (127.0.0.0/8) unless any
 * is set. NULL on failure, with *refused set if host was not loopback. */
dv_control *dv_control_start(dv_server *s, const char *listen, int any, int *port, int *refused);
void dv_control_stop(dv_control *c);
/* Applies one command line; writes the answer to out. Used by the flags too. */
void dv_control_apply(dv_server *s, const char *line, char *out, size_t outlen);

#endif /* DV_CONTROL_H */
