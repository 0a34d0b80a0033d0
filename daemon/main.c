/* tesserad: the Tessera HTTP daemon (configuration, start, clean stop on SIGTERM/SIGINT). */
#include "daemon/config.h"
#include "daemon/http.h"
#include "engine/base/error.h"

#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <pthread.h>
#include <string.h>

static void usage(FILE *f)
{
    fprintf(f,
            "usage: tesserad [--config FILE] [--listen ADDR:PORT] [--threads N]\n"
            "                [--demo-dir DIR] [--jobs-dir DIR] [--access-log FILE]\n"
            "Serves FITS datasets over HTTP (see README.md).  Without --config it serves the\n"
            "bundled demo datasets, with jobs under $TESSERA_JOBS_DIR or the build's jobs/\n"
            "directory.  --jobs-dir overrides jobs.dir, --access-log (\"-\" = stderr) access_log.\n"
            "SIGTERM or SIGINT stop it cleanly; SIGHUP reopens the access log.\n");
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"config", required_argument, NULL, 'c'},
        {"listen", required_argument, NULL, 'l'},
        {"threads", required_argument, NULL, 't'},
        {"demo-dir", required_argument, NULL, 'd'},
        {"jobs-dir", required_argument, NULL, 'j'},
        {"access-log", required_argument, NULL, 'a'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *config_path = NULL, *listen = NULL, *demo_dir = NULL, *jobs_dir = NULL;
    const char *access_log = NULL;
    long threads = -1;
    int c;
    while ((c = getopt_long(argc, argv, "c:l:t:d:j:a:h", opts, NULL)) != -1) {
        switch (c) {
        case 'c': config_path = optarg; break;
        case 'l': listen = optarg; break;
        case 'd': demo_dir = optarg; break;
        case 'j': jobs_dir = optarg; break;
        case 'a': access_log = optarg; break;
        case 't': {
            char *end;
            errno = 0;
            threads = strtol(optarg, &end, 10);
            if (errno || *end || threads < 0 || threads > 1024) {
                fprintf(stderr, "tesserad: --threads must be 0..1024\n");
                return 2;
            }
            break;
        }
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind < argc) {
        usage(stderr);
        return 2;
    }

    tess_config cfg;
    char err[512];
    if (config_init(&cfg)) {
        fprintf(stderr, "tesserad: out of memory\n");
        return 1;
    }
    int rc = config_path ? config_load_file(config_path, &cfg, err, sizeof(err))
                         : config_load_demo(&cfg, demo_dir, err, sizeof(err));
    if (rc) {
        fprintf(stderr, "tesserad: %s\n", err);
        config_release(&cfg);
        return 1;
    }
    if (listen && config_set_listen(&cfg, listen, err, sizeof(err))) {
        fprintf(stderr, "tesserad: %s\n", err);
        config_release(&cfg);
        return 2;
    }
    if (threads >= 0)
        cfg.threads = (int)threads;
    if (access_log) {
        free(cfg.access_log);
        if (!(cfg.access_log = strdup(access_log))) {
            fprintf(stderr, "tesserad: out of memory\n");
            config_release(&cfg);
            return 1;
        }
    }
    if (!jobs_dir && !config_path) {
        jobs_dir = getenv("TESSERA_JOBS_DIR");
        if (!jobs_dir || !*jobs_dir)
            jobs_dir = TESSERA_DEMO_JOBS_DIR;
    }
    if (jobs_dir) {
        free(cfg.jobs_dir);
        if (!(cfg.jobs_dir = strdup(jobs_dir))) {
            fprintf(stderr, "tesserad: out of memory\n");
            config_release(&cfg);
            return 1;
        }
    }

    /* Block the stop signals in every thread; the main thread waits for them. */
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &stop, NULL);
    signal(SIGPIPE, SIG_IGN);

    tserver *srv;
    if ((rc = tserver_start(&cfg, &srv, err, sizeof(err)))) {
        fprintf(stderr, "tesserad: %s\n", err);
        config_release(&cfg);
        return 1;
    }
    for (int i = 0; i < catalog_count(srv->cat); i++) {
        const dataset *d = catalog_at(srv->cat, i);
        if (d->wcs_error[0])
            fprintf(stderr, "tesserad: dataset '%s' has no usable WCS (served without its sky "
                    "routes): %s\n", d->name, d->wcs_error);
    }
    fprintf(stderr, "tesserad: serving %d datasets on http://%s%s%s:%d/\n", catalog_count(srv->cat),
            strchr(cfg.listen_addr, ':') ? "[" : "", cfg.listen_addr,
            strchr(cfg.listen_addr, ':') ? "]" : "", tserver_port(srv));
    fflush(stderr);

    int sig = 0;
    while (sigwait(&stop, &sig) == 0 && sig == SIGHUP) {
        if (tserver_reopen_logs(srv))
            fprintf(stderr, "tesserad: SIGHUP: cannot reopen the access log\n");
    }
    fprintf(stderr, "tesserad: %s received, finishing requests in flight\n",
            sig == SIGTERM ? "SIGTERM" : "SIGINT");
    tserver_stop(srv, 10);
    config_release(&cfg);
    fprintf(stderr, "tesserad: stopped\n");
    return 0;
}
