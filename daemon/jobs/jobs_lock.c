/* The directory lock: one server per jobs.dir when the store is jobs.dir's own
 * (jobs_impl.h). */
#include "daemon/jobs/jobs_impl.h"
#include "engine/base/clock.h"
#include "engine/base/error.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

/* Opens and flocks dir/lock (created when missing), writes this pid into it and
 * remembers its identity.  Returns 0 with *fd, or TESS_EIO with err (EWOULDBLOCK: held by
 * another server, named by the pid written there). */
static int take_lock_file(jobs *J, int *fd_out, char *err, size_t errlen)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/lock", J->dir);
    int fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) {
        tess_seterr(err, errlen, "jobs.dir lock '%s': %s", path, strerror(errno));
        return TESS_EIO;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        char pid[32] = "";
        ssize_t n = pread(fd, pid, sizeof pid - 1, 0);
        pid[n > 0 ? n : 0] = '\0';
        pid[strcspn(pid, "\n")] = '\0';
        close(fd);
        if (e == EWOULDBLOCK)
            tess_seterr(err, errlen, "jobs.dir '%s' is in use by another server%s%.20s%s: one "
                        "server per jobs directory", J->dir, pid[0] ? " (pid " : "", pid,
                        pid[0] ? ")" : "");
        else
            tess_seterr(err, errlen, "jobs.dir lock '%s': %s", path, strerror(e));
        return TESS_EIO;
    }
    char pid[32];
    int n = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
    /* The pid is only for the message above: failing to write it changes nothing. */
    int wrote = ftruncate(fd, 0) == 0 && pwrite(fd, pid, (size_t)n, 0) == n;
    (void)wrote;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        tess_seterr(err, errlen, "jobs.dir lock '%s': %s", path, strerror(errno));
        close(fd);
        return TESS_EIO;
    }
    J->lock_dev = st.st_dev;
    J->lock_ino = st.st_ino;
    *fd_out = fd;
    return 0;
}

/* Takes the jobs directory for this runner: an exclusive flock on the directory itself
 * and one on dir/lock, both held until jobs_close (or the process ends, kill -9 included:
 * the kernel drops them).  A second runner on the same directory, in another process or
 * this one, would resume and run the same jobs twice; it is refused, naming the holder's
 * pid written in dir/lock.  The directory's lock stays when dir/lock is removed or
 * replaced; dir/lock is taken again then (lock_still_ours).  Returns 0 or TESS_EIO with
 * err. */
int jobs_lock_dir(jobs *J, char *err, size_t errlen)
{
    J->dirfd = open(J->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (J->dirfd < 0) {
        tess_seterr(err, errlen, "jobs.dir '%s': %s", J->dir, strerror(errno));
        return TESS_EIO;
    }
    if (flock(J->dirfd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        if (e == EWOULDBLOCK) {
            char path[PATH_MAX], pid[32] = "";
            snprintf(path, sizeof path, "%s/lock", J->dir);
            int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
            ssize_t n = fd >= 0 ? pread(fd, pid, sizeof pid - 1, 0) : -1;
            if (fd >= 0)
                close(fd);
            pid[n > 0 ? n : 0] = '\0';
            pid[strcspn(pid, "\n")] = '\0';
            tess_seterr(err, errlen, "jobs.dir '%s' is in use by another server (%s%.20s%s): "
                        "one server per jobs directory", J->dir, pid[0] ? "pid " : "", pid,
                        pid[0] ? "" : "its lock file was removed");
            return TESS_EIO;
        }
        /* A file system without directory locks (some network ones): the lock file alone. */
        fprintf(stderr, "tesserad: jobs.dir '%s' cannot be locked (%s): relying on its lock "
                "file only\n", J->dir, strerror(e));
        close(J->dirfd);
        J->dirfd = -1;
    }
    return take_lock_file(J, &J->lockfd, err, errlen);
}

/* Whether dir/lock is still the file this runner locked (same device and inode); when it
 * was removed or replaced, it is taken again (the directory's lock kept others out
 * meanwhile).  When another process holds the new file (a server that locks only the
 * file), this runner takes no more jobs (lock_lost).  Lock held.  Returns 1 while ours
 * (always without a lock: jobs_open took none for a shared store). */
int jobs_lock_still_ours(jobs *J)
{
    if (J->lockfd < 0)
        return 1;   /* none taken: the servers of a shared store share jobs.dir */
    if (J->lock_lost)
        return 0;
    J->lock_checked = tess_mono_s();
    char path[PATH_MAX], err[PATH_MAX + 128];
    snprintf(path, sizeof path, "%s/lock", J->dir);
    struct stat st;
    if (stat(path, &st) == 0 && st.st_dev == J->lock_dev && st.st_ino == J->lock_ino)
        return 1;
    int fd = -1;
    if (take_lock_file(J, &fd, err, sizeof err) == 0) {
        close(J->lockfd);
        J->lockfd = fd;
        fprintf(stderr, "tesserad: the lock file '%s' was removed or replaced; taken again\n",
                path);
        return 1;
    }
    J->lock_lost = 1;
    fprintf(stderr, "tesserad: the lock file '%s' was replaced: %s; this server runs no more "
            "jobs\n", path, err);
    return 0;
}
