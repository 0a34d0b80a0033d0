/* The tessera command: the one-screen overview and the dispatch to each command's file. */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"
#include "cli/common.h"

/* What `tessera`, `tessera --help` print: the commands; each has its own --help. */
static const char overview_usage[] =
    "usage: tessera COMMAND [ARGS]   (tessera COMMAND --help: its options and exit statuses;\n"
    "       tessera --version; tessera(1))\n"
    "\n"
    "The engine of tesserad, offline:\n"
    "  reproject   a FITS image or cube onto a target WCS (nearest, bilinear, bicubic,\n"
    "              lanczos3, or exact flux-conserving)\n"
    "  mosaic      many images onto one grid: reprojected, backgrounds matched, coadded\n"
    "  hips        a static HiPS tree of an image (properties, tiles, Allsky, Moc.fits)\n"
    "  mkstack     a synthetic EM-like stack of frames and its true trajectory\n"
    "A server's job API (--server URL, default $TESSERA_SERVER or http://127.0.0.1:8080):\n"
    "  submit      post a job (a JSON file) and follow it with a progress bar\n"
    "  jobs        list the server's jobs\n"
    "  cancel      cancel a job\n"
    "A cluster node without HTTP (shared job store):\n"
    "  worker      run blocks of the jobs of jobs.database (tesserad --worker)\n";

int main(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
        fputs(overview_usage, argc < 2 ? stderr : stdout);
        return argc < 2 ? CLI_EXIT_USAGE : CLI_EXIT_OK;
    }
    if (strcmp(argv[1], "--version") == 0) {
        printf("tessera %s\n", PACKAGE_VERSION);
        return CLI_EXIT_OK;
    }
    /* A file size limit (ulimit -f) then fails a write with EFBIG, reported like any
     * other write error, instead of killing the process. */
    signal(SIGXFSZ, SIG_IGN);
    if (strcmp(argv[1], "reproject") == 0)
        return cmd_reproject(argc - 1, argv + 1);
    if (strcmp(argv[1], "hips") == 0)
        return cmd_hips(argc - 1, argv + 1);
    if (strcmp(argv[1], "submit") == 0)
        return cmd_submit(argc - 1, argv + 1);
    if (strcmp(argv[1], "jobs") == 0)
        return cmd_jobs(argc - 1, argv + 1);
    if (strcmp(argv[1], "cancel") == 0)
        return cmd_cancel(argc - 1, argv + 1);
    if (strcmp(argv[1], "mkstack") == 0)
        return cmd_mkstack(argc - 1, argv + 1);
    if (strcmp(argv[1], "mosaic") == 0)
        return cmd_mosaic(argc - 1, argv + 1);
    if (strcmp(argv[1], "worker") == 0)
        return cmd_worker(argc - 1, argv + 1);
    cli_msg("unknown command '%s' (commands: reproject, hips, mosaic, submit, jobs, cancel, "
            "mkstack, worker)", argv[1]);
    return CLI_EXIT_USAGE;
}
