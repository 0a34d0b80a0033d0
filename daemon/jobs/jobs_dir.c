/* jobs.dir: the paths of a job's files, the start-up sweep, the disk its files use
 * (jobs_impl.h). */
#include "daemon/jobs/jobs_impl.h"
#include "daemon/jobs/jobbudget.h"
#include "engine/base/error.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

double jobs_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int rm_cb(const char *path, const struct stat *st, int flag, struct FTW *f)
{
    (void)st;
    (void)flag;
    (void)f;
    remove(path);
    return 0;
}

void jobs_rm_tree(const char *path)
{
    struct stat st;
    if (lstat(path, &st) == 0)
        nftw(path, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}

void jobs_workdir(const jobs *J, const char *id, char *out)
{
    snprintf(out, PATH_MAX, "%s/work/%s", J->dir, id);
}

void jobs_tmp_path(const jobs *J, const char *id, char *out)
{
    snprintf(out, PATH_MAX, "%s/results/.%s.tmp", J->dir, id);
}

void jobs_result_path(const jobs *J, const char *id, const char *content_type, char *out)
{
    int fits = !content_type || !*content_type || strcmp(content_type, "application/fits") == 0;
    snprintf(out, PATH_MAX, "%s/results/%s.%s", J->dir, id, fits ? "fits" : "bin");
}

int jobs_state_open(const char *state)
{
    return strcmp(state, "queued") == 0 || strcmp(state, "running") == 0;
}

int jobs_valid_id(const char *id)
{
    if (strlen(id) != 16)
        return 0;
    for (int i = 0; i < 16; i++)
        if (!((id[i] >= '0' && id[i] <= '9') || (id[i] >= 'a' && id[i] <= 'f')))
            return 0;
    return 1;
}

/* Bytes of work files and products under jobs.dir now (jobbudget_du of work/ and
 * results/); 0 without jobs.disk_mb, which alone needs it. */
double jobs_disk_used_locked(jobs *J)
{
    if (J->cfg->jobs_disk_mb == 0)
        return 0.0;
    char work[PATH_MAX], results[PATH_MAX];
    snprintf(work, sizeof work, "%s/work", J->dir);
    snprintf(results, sizeof results, "%s/results", J->dir);
    const char *const both[] = {work, results};
    return jobbudget_du(both, 2);
}

/* Syncs the entries of directory `path` (fsync); 0 or -1 with errno. */
int jobs_sync_dir(const char *path)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    int rc = fsync(fd);
    int e = errno;
    close(fd);
    errno = e;
    return rc;
}

/* Flushes the files finished blocks wrote under work directory wd (syncfs of its file
 * system), lock released meanwhile. */
void jobs_sync_work_locked(jobs *J, const char *wd)
{
    pthread_mutex_unlock(&J->lock);
    int fd = open(wd, O_RDONLY | O_DIRECTORY);
    if (fd >= 0) {
        syncfs(fd);
        close(fd);
    }
    pthread_mutex_lock(&J->lock);
}

/* Whether jobs.dir's work files and products are over jobs.disk_mb (detail says so), with
 * `wd` the running job's work directory.  Lock held. */
int jobs_over_disk_locked(jobs *J, const char *wd, char *detail, size_t len)
{
    if (J->cfg->jobs_disk_mb == 0)
        return 0;
    const char *one[] = {wd};
    return jobbudget_over_disk(J->cfg, jobs_disk_used_locked(J), jobbudget_du(one, 1), detail,
                               len);
}

int jobs_mkdir_p(const char *dir, char *err, size_t errlen)
{
    char buf[PATH_MAX];
    snprintf(buf, sizeof(buf), "%s", dir);
    for (char *p = buf + 1; *p; p++) {
        if (*p == '/') {
            *p = '\0';
            mkdir(buf, 0755);
            *p = '/';
        }
    }
    if (mkdir(buf, 0755) && errno != EEXIST) {
        tess_seterr(err, errlen, "cannot create '%s': %s", dir, strerror(errno));
        return TESS_EIO;
    }
    return 0;
}

/* Removes *.tmp products and work directories of jobs that are not running. */
void jobs_sweep(jobs *J)
{
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/results", J->dir);
    DIR *d = opendir(path);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            size_t n = strlen(e->d_name);
            char id[17] = "", state[16] = "";
            /* Shared: another server may be writing the product of a running job. */
            if (J->src->dir_shared && n == 21) {
                snprintf(id, sizeof id, "%.16s", e->d_name + 1);
                if (jobstore_state(J->st, id, state) != 0 || strcmp(state, "running") == 0)
                    continue;
            }
            if (e->d_name[0] == '.' && n > 4 && strcmp(e->d_name + n - 4, ".tmp") == 0) {
                char f[PATH_MAX + 260];
                snprintf(f, sizeof(f), "%s/%s", path, e->d_name);
                unlink(f);
            }
        }
        closedir(d);
    }
    snprintf(path, sizeof(path), "%s/work", J->dir);
    d = opendir(path);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            if (e->d_name[0] == '.')
                continue;
            char state[16] = "";
            int rc = jobs_valid_id(e->d_name) ? jobstore_state(J->st, e->d_name, state)
                                              : TESS_ENOTFOUND;
            int keep = (rc == 0 && strcmp(state, "running") == 0) || rc == TESS_EIO;
            if (!keep) {
                char f[PATH_MAX + 260];
                snprintf(f, sizeof(f), "%s/%s", path, e->d_name);
                jobs_rm_tree(f);
            }
        }
        closedir(d);
    }
}
