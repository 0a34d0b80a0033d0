/* tesserad: the Tessera HTTP daemon (configuration, start, clean stop on SIGTERM/SIGINT). */
#include "daemon/app.h"
#include "daemon/collection/collection.h"
#include "daemon/catalog.h"
#include "daemon/config.h"
#include "daemon/http.h"
#include "daemon/jobs/jobs.h"
#include "engine/base/pool.h"

#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <pthread.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void usage(FILE *f)
{
    fprintf(f,
            "usage: tesserad [--config FILE] [--listen ADDR:PORT] [--threads N]\n"
            "                [--demo-dir DIR] [--jobs-dir DIR] [--access-log FILE]\n"
            "                [--shutdown-grace S] [--worker] [--version]\n"
            "Serves FITS datasets over HTTP (tesserad(8), tesserad.json(5)).  Without --config\n"
            "it serves the demo datasets of --demo-dir, $TESSERA_DEMO_DIR or " TESSERA_PKGDATADIR "/demo,\n"
            "with jobs under $TESSERA_JOBS_DIR or " TESSERA_DEMO_JOBS_DIR ".\n"
            "--jobs-dir overrides jobs.dir, --access-log (\"-\" = stderr) access_log,\n"
            "--shutdown-grace limits.shutdown_grace_s.  --worker (with jobs.database set):\n"
            "no HTTP, only the blocks of the shared job store's jobs (`tessera worker`).\n"
            "SIGTERM or SIGINT stop it: requests in flight get limits.shutdown_grace_s\n"
            "seconds, a second signal ends it at once; SIGHUP reopens the access log.\n");
}

/* Exit status when a stop signal ends tesserad before a clean stop: during start-up,
 * when the grace period ran out, or at a second signal. */
#define EXIT_CUT_SHORT 1

/* The server's life as the signal thread sees it.  The signal thread alone takes
 * SIGTERM, SIGINT and SIGHUP (blocked in every other thread, so none can stop it from
 * acting): during start-up a stop signal ends the process at once; while serving it
 * tells the main thread to stop; while stopping a second one, or the end of the grace
 * period, ends the process. */
enum life { STARTING, SERVING, STOPPING };
static pthread_mutex_t life_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t life_cond = PTHREAD_COND_INITIALIZER;
static enum life life = STARTING;
static int stop_sig;              /* the signal that started the stop */
static tserver *life_srv;         /* while SERVING, for SIGHUP */

static const char *sig_name(int sig)
{
    return sig == SIGTERM ? "SIGTERM" : sig == SIGINT ? "SIGINT" : "SIGHUP";
}

/* Waits up to `grace_s` seconds for a second SIGTERM or SIGINT; returns it, or 0 when
 * the time ran out. */
static int wait_second(int grace_s)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    struct timespec end;
    clock_gettime(CLOCK_MONOTONIC, &end);
    end.tv_sec += grace_s;
    for (;;) {
        struct timespec now, left;
        clock_gettime(CLOCK_MONOTONIC, &now);
        left.tv_sec = end.tv_sec - now.tv_sec;
        left.tv_nsec = end.tv_nsec - now.tv_nsec;
        if (left.tv_nsec < 0) {
            left.tv_nsec += 1000000000L;
            left.tv_sec--;
        }
        if (left.tv_sec < 0)
            return 0;
        int sig = sigtimedwait(&set, NULL, &left);
        if (sig > 0)
            return sig;
        if (errno == EAGAIN)
            return 0;
    }
}

static void *signal_main(void *arg)
{
    int grace_s = *(const int *)arg;
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGHUP);
    for (;;) {
        int sig = 0;
        if (sigwait(&set, &sig) != 0)
            continue;
        pthread_mutex_lock(&life_lock);
        if (sig == SIGHUP) {
            if (life == SERVING && tserver_reopen_logs(life_srv))
                fprintf(stderr, "tesserad: SIGHUP: cannot reopen the access log\n");
            pthread_mutex_unlock(&life_lock);
            continue;
        }
        if (life == STARTING) {
            fprintf(stderr, "tesserad: %s received during start-up; exiting\n", sig_name(sig));
            _exit(EXIT_CUT_SHORT);
        }
        life = STOPPING;
        stop_sig = sig;
        pthread_cond_signal(&life_cond);
        pthread_mutex_unlock(&life_lock);
        break;
    }
    int again = wait_second(grace_s);
    if (again)
        fprintf(stderr, "tesserad: second %s received; exiting now, without the requests "
                "still in flight\n", sig_name(again));
    else
        fprintf(stderr, "tesserad: requests still in flight %d s after the %s "
                "(limits.shutdown_grace_s); exiting without them\n", grace_s,
                sig_name(stop_sig));
    _exit(EXIT_CUT_SHORT);
    return NULL;
}

/* --worker: the job runner over the shared store without the HTTP server, until a stop
 * signal; its blocks in flight then finish (within limits.shutdown_grace_s). */
static int run_worker(tess_config *cfg)
{
    char err[512];
    if (!cfg->jobs_database || !cfg->jobs_dir) {
        fprintf(stderr, "tesserad: --worker needs jobs.database and jobs.dir in the "
                "configuration (a worker shares a cluster's job store)\n");
        return 2;
    }
    /* Composed as the server is (tserver_start), the same settings included; only the
     * HTTP front end is left out, and with it the disk tier of the response cache, which
     * only answers requests (a worker given the servers' configuration would otherwise
     * index and trim their cache.disk_dir as a second owner). */
    cfg->cache_disk_mb = 0;
    tess_app *app = NULL;
    if (tess_app_open(cfg, &app, err, sizeof err)) {
        fprintf(stderr, "tesserad: %s\n", err);
        return 1;
    }
    fprintf(stderr, "tesserad: worker running the jobs of the shared job store with %d "
            "threads\n", pool_threads(app->workers));
    fflush(stderr);
    pthread_mutex_lock(&life_lock);
    life = SERVING;
    while (life != STOPPING)
        pthread_cond_wait(&life_cond, &life_lock);
    int sig = stop_sig;
    pthread_mutex_unlock(&life_lock);
    fprintf(stderr, "tesserad: %s received after %llu job blocks, finishing the blocks in "
            "flight\n", sig_name(sig), jobs_blocks_run(app->jobs));
    tess_app_close(app);
    fprintf(stderr, "tesserad: stopped\n");
    return 0;
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
        {"shutdown-grace", required_argument, NULL, 'g'},
        {"worker", no_argument, NULL, 'w'},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},
        {NULL, 0, NULL, 0},
    };
    const char *config_path = NULL, *listen = NULL, *demo_dir = NULL, *jobs_dir = NULL;
    const char *access_log = NULL;
    long threads = -1, grace = -1;
    int worker = 0;
    int c;
    while ((c = getopt_long(argc, argv, "c:l:t:d:j:a:g:h", opts, NULL)) != -1) {
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
        case 'g': {
            char *end;
            errno = 0;
            grace = strtol(optarg, &end, 10);
            if (errno || *end || end == optarg || grace < 0 || grace > 3600) {
                fprintf(stderr, "tesserad: --shutdown-grace must be 0..3600 seconds\n");
                return 2;
            }
            break;
        }
        case 'w': worker = 1; break;
        case 'h': usage(stdout); return 0;
        case 'V':
            /* The version, then where the programs look for what `make install` put. */
            printf("tesserad %s\nviewer: %s\nnode_modules: %s\ndemo: %s\ndemo jobs: %s\n",
                   PACKAGE_VERSION, TESSERA_PKGDATADIR "/viewer",
                   TESSERA_PKGDATADIR "/node_modules", TESSERA_PKGDATADIR "/demo",
                   TESSERA_DEMO_JOBS_DIR);
            return 0;
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
    if (grace >= 0)
        cfg.shutdown_grace_s = (int)grace;
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

    /* Block the stop signals in every thread; the signal thread waits for them, from
     * before the datasets are opened (start-up can be stopped too). */
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &stop, NULL);
    signal(SIGPIPE, SIG_IGN);
    int grace_s = cfg.shutdown_grace_s;
    pthread_t sigth;
    if (pthread_create(&sigth, NULL, signal_main, &grace_s) != 0) {
        fprintf(stderr, "tesserad: cannot start the signal thread\n");
        config_release(&cfg);
        return 1;
    }
    pthread_detach(sigth);

    if (worker) {
        rc = run_worker(&cfg);
        config_release(&cfg);
        return rc;
    }
    tserver *srv;
    if ((rc = tserver_start(&cfg, &srv, err, sizeof(err)))) {
        fprintf(stderr, "tesserad: %s\n", err);
        config_release(&cfg);
        return 1;
    }
    char warn[2][CONFIG_WARN_LEN];
    int nwarn = config_warnings(&cfg, warn, 2);
    for (int i = 0; i < nwarn && i < 2; i++)
        fprintf(stderr, "tesserad: warning: %s\n", warn[i]);
    for (int i = 0; i < catalog_count(srv->app->cat); i++) {
        const dataset *d = catalog_at(srv->app->cat, i);
        if (d->wcs_error[0])
            fprintf(stderr, "tesserad: dataset '%s' has no usable WCS (served without its sky "
                    "routes): %s\n", d->name, d->wcs_error);
    }
    int nds = catalog_count(srv->app->cat);
    int ncol = srv->app->collections ? srv->app->collections->n : 0;
    char cols[64] = "";
    if (ncol > 0)
        snprintf(cols, sizeof cols, " and %d collection%s", ncol, ncol == 1 ? "" : "s");
    fprintf(stderr, "tesserad: serving %d dataset%s%s on http://%s%s%s:%d/\n", nds,
            nds == 1 ? "" : "s", cols, strchr(cfg.listen_addr, ':') ? "[" : "", cfg.listen_addr,
            strchr(cfg.listen_addr, ':') ? "]" : "", tserver_port(srv));
    fflush(stderr);

    pthread_mutex_lock(&life_lock);
    life = SERVING;   /* a stop signal before this has ended the process */
    life_srv = srv;
    while (life != STOPPING)
        pthread_cond_wait(&life_cond, &life_lock);
    life_srv = NULL;
    int sig = stop_sig;
    pthread_mutex_unlock(&life_lock);
    fprintf(stderr, "tesserad: %s received, finishing requests in flight (at most %d s; a "
            "second signal stops at once)\n", sig_name(sig), grace_s);
    tserver_stop(srv, grace_s);
    config_release(&cfg);
    fprintf(stderr, "tesserad: stopped\n");
    return 0;
}
