/* fake_unix.h -- the listening socket of the C tests' fake servers: a unix
 * socket at path (any file there first removed), listening, its fd. A fake
 * accepts on it from a thread of its own and answers what its test chooses. */
#ifndef FAKE_UNIX_H
#define FAKE_UNIX_H

#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "mql_test.h"

static int fake_unix_listen(const char *path) {
    struct sockaddr_un sa;
    int fd;
    unlink(path);
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
    fd = socket(AF_UNIX, SOCK_STREAM, 0);
    CHECK(bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0);
    CHECK(listen(fd, 4) == 0);
    return fd;
}

#endif /* FAKE_UNIX_H */
