/* dv_main.c -- mqlease-devbroker: a RocketMQ 5 SimpleConsumer/producer broker in memory.
 *
 *   mqlease-devbroker --listen 127.0.0.1:PORT [--control 127.0.0.1:PORT [--control-any]]
 *                     [--topic NAME]...
 *                     [--fail-change P] [--fail-ack P] [--delay-change-ms N]
 *                     [--max-renewals N] [--min-invisible-ms N] [--time-scale F]
 *                     [--SETTING VALUE]...   (any `set SETTING VALUE` of the control port,
 *                                             dashes for underscores: --corrupt-digest 0.5)
 *
 * Prints "mqlease-devbroker listening on HOST:PORT control HOST:PORT" (the
 * addresses bound) once it accepts calls; SIGTERM or SIGINT stop it. The
 * control port has no authentication: it binds a loopback address only, unless
 * --control-any allows any. See dv_control.h for the
 * control commands, which the --fail-* flags set at start.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dv_control.h"
#include "dv_server.h"

static volatile int stopping;   /* set by the signal handler: the only global */

static void on_signal(int signo) {
    (void)signo;
    stopping = 1;
}

/* The host part of "host:port" (as given: "127.0.0.1", "0.0.0.0", "[::]"). */
static int host_len(const char *addr) {
    const char *colon = strrchr(addr, ':');
    return colon ? (int)(colon - addr) : (int)strlen(addr);
}

static void usage(void) {
    fprintf(stderr,
            "usage: mqlease-devbroker --listen HOST:PORT [--control HOST:PORT [--control-any]]\n"
            "       [--topic NAME]...\n"
            "       [--fail-change P] [--fail-ack P] [--delay-change-ms N] [--max-renewals N]\n"
            "       [--min-invisible-ms N] [--time-scale F] [--SETTING VALUE]...\n"
            "       (every `set` of the control port is a flag: --gzip 1, --digest sha1, ...)\n");
    exit(2);
}

int main(int argc, char **argv) {
    const char *listen = NULL, *control = NULL;
    const char *settings[64];
    const char *topics[256];
    int nsettings = 0, ntopics = 0, port = 0, cport = 0, control_any = 0, refused = 0, i;
    dv_server *s;
    dv_control *ctl = NULL;
    char out[256], line[300];
    struct sigaction sa;

    for (i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--control-any") == 0) {   /* the one flag without a value */
            control_any = 1;
            continue;
        }
        if (!v) usage();
        if (strcmp(a, "--listen") == 0) listen = v;
        else if (strcmp(a, "--control") == 0) control = v;
        else if (strcmp(a, "--topic") == 0 && ntopics < 256) topics[ntopics++] = v;
        else if (nsettings < 62 && strncmp(a, "--", 2) == 0) {
            settings[nsettings++] = a + 2;
            settings[nsettings++] = v;
        } else usage();
        i++;
    }
    if (!listen) usage();
    s = dv_server_new(listen, &port);
    if (!s) {
        fprintf(stderr, "mqlease-devbroker: cannot listen on %s\n", listen);
        return 1;
    }
    for (i = 0; i < ntopics; i++) dv_server_add_topic(s, topics[i]);
    for (i = 0; i < nsettings; i += 2) {
        char key[64];
        size_t k;
        snprintf(key, sizeof(key), "%s", settings[i]);
        for (k = 0; key[k]; k++)
            if (key[k] == '-') key[k] = '_';
        snprintf(line, sizeof(line), "set %s %s", key, settings[i + 1]);
        dv_control_apply(s, line, out, sizeof(out));
        if (strncmp(out, "ok", 2) != 0) {
            fprintf(stderr, "mqlease-devbroker: --%s: %s\n", settings[i], out);
            dv_server_free(s);
            return 2;
        }
    }
    if (control) {
        ctl = dv_control_start(s, control, control_any, &cport, &refused);
        if (!ctl) {
            if (refused)
                fprintf(stderr, "mqlease-devbroker: --control %s is not a loopback address; the "
                        "control port has no authentication: add --control-any to bind it\n",
                        control);
            else
                fprintf(stderr, "mqlease-devbroker: cannot listen on control %s\n", control);
            dv_server_free(s);
            return 1;
        }
    }
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    printf("mqlease-devbroker listening on %.*s:%d", host_len(listen), listen, port);
    if (ctl) printf(" control %.*s:%d", host_len(control), control, cport);
    printf("\n");
    fflush(stdout);
    dv_server_run(s, &stopping);
    dv_control_stop(ctl);
    dv_server_free(s);
    return 0;
}
