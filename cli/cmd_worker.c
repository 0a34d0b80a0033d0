/* tessera worker: a compute-only node of a cluster, as tesserad --worker (no HTTP). */
#include "cli/commands.h"
#include "cli/common.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char worker_usage[] =
    "usage: tessera worker --config FILE [--threads N]\n"
    "Runs blocks of the jobs of a shared job store (jobs.database and jobs.dir of FILE)\n"
    "without serving HTTP, as one more node of a cluster (e.g. srun tessera worker ...).\n"
    "It is tesserad --worker: the tesserad next to this tessera, else $TESSERA_TESSERAD,\n"
    "else " TESSERA_SBINDIR "/tesserad, else tesserad on PATH.  SIGTERM lets its blocks\n"
    "in flight finish, then it exits.\n";

/* The tesserad to run: beside this program's file when there is one (the build tree),
 * else $TESSERA_TESSERAD, else the installed one. */
static void find_tesserad(char *out, size_t len)
{
    const char *env = getenv("TESSERA_TESSERAD");
    char self[PATH_MAX - 16];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n > 0) {
        self[n] = '\0';
        char *slash = strrchr(self, '/');
        if (slash) {
            slash[1] = '\0';
            snprintf(out, len, "%stesserad", self);
            if (access(out, X_OK) == 0)
                return;
        }
    }
    if (env && *env) {
        snprintf(out, len, "%s", env);
        return;
    }
    /* Installed: tessera in $(bindir), tesserad in $(sbindir). */
    snprintf(out, len, "%s/tesserad", TESSERA_SBINDIR);
    if (access(out, X_OK) == 0)
        return;
    snprintf(out, len, "tesserad");
}

int cmd_worker(int argc, char **argv)
{
    const char *config = NULL, *threads = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            fputs(worker_usage, stdout);
            return CLI_EXIT_OK;
        } else if (strcmp(argv[i], "--config") == 0 && i + 1 < argc) {
            config = argv[++i];
        } else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc) {
            threads = argv[++i];
        } else {
            fputs(worker_usage, stderr);
            return CLI_EXIT_USAGE;
        }
    }
    if (!config) {
        fputs(worker_usage, stderr);
        return CLI_EXIT_USAGE;
    }
    char prog[PATH_MAX];
    find_tesserad(prog, sizeof prog);
    char *args[8];
    int k = 0;
    args[k++] = prog;
    args[k++] = "--worker";
    args[k++] = "--config";
    args[k++] = (char *)config;
    if (threads) {
        args[k++] = "--threads";
        args[k++] = (char *)threads;
    }
    args[k] = NULL;
    execvp(prog, args);
    cli_msg("cannot run %s: %s", prog, strerror(errno));
    return CLI_EXIT_FAIL;
}
