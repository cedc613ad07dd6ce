/* mql_absl.c -- abseil's mutex deadlock detection off, before grpc_init.
 *
 * grpc 1.51 builds its gpr_mu on absl::Mutex. Abseil compiled without NDEBUG
 * (Debian's libabsl20220623 is) checks every Mutex::Lock for lock-order cycles:
 * it keeps a graph of all mutexes and records a stack trace per acquisition
 * (absl/synchronization/mutex.cc, DebugOnlyDeadlockCheck). grpc takes several
 * mutexes per call, so with 25,000 renewals a second that bookkeeping was 4 %
 * of the client's CPU (perf: GraphCycles::GetId, UpdateStackTrace). Release
 * builds of abseil skip it; absl::SetMutexDeadlockDetectionMode(kIgnore) turns
 * it off at run time. That is a C++ function, so it is looked up by its
 * mangled name in the abseil library grpc already loaded; an abseil without it
 * (another version, another namespace) is simply left as it is.
 */
#include "mql.h"

#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <string.h>

/* absl::OnDeadlockCycle::kIgnore */
#define ABSL_DEADLOCK_IGNORE 0

static const char *const deadlock_mode_symbols[] = {
    "_ZN4absl7debian329SetMutexDeadlockDetectionModeENS0_15OnDeadlockCycleE",
    "_ZN4absl29SetMutexDeadlockDetectionModeENS_15OnDeadlockCycleE",
};

static int find_absl_sync(struct dl_phdr_info *info, size_t size, void *out) {
    (void)size;
    if (!strstr(info->dlpi_name, "libabsl_synchronization")) return 0;
    *(const char **)out = info->dlpi_name;
    return 1;
}

/* Set once, by the first caller, under pthread_once: whether it was turned off. */
static int absl_quieted;

static void absl_deadlock_detection_off(void) {
    const char *path = NULL;
    void *lib;
    size_t i;
    /* The library came in with grpc, possibly under a Lua require that loaded
     * us RTLD_LOCAL: only a handle of its own finds its symbols. */
    dl_iterate_phdr(find_absl_sync, &path);
    if (!path || !(lib = dlopen(path, RTLD_LAZY | RTLD_NOLOAD))) return;
    for (i = 0; i < sizeof(deadlock_mode_symbols) / sizeof(deadlock_mode_symbols[0]); i++) {
        void *sym = dlsym(lib, deadlock_mode_symbols[i]);
        if (sym) {
            void (*set_mode)(int);
            memcpy(&set_mode, &sym, sizeof(set_mode));
            set_mode(ABSL_DEADLOCK_IGNORE);
            absl_quieted = 1;
            break;
        }
    }
    dlclose(lib);
}

static pthread_once_t absl_once = PTHREAD_ONCE_INIT;

int mql_absl_quiet(void) {
    pthread_once(&absl_once, absl_deadlock_detection_off);
    return absl_quieted;
}
