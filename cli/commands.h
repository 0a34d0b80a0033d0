/* The subcommands of `tessera`, each in its own file: argv[0] is the subcommand's name;
 * the return value is the process's exit status. */
#ifndef TESSERA_CLI_COMMANDS_H
#define TESSERA_CLI_COMMANDS_H

/* cmd_reproject.c: an image or cube onto a target WCS (engine/sky/reproject.h). */
int cmd_reproject(int argc, char **argv);

/* cmd_hips.c: a static HiPS tree of an image (engine/hips/healpix.h). */
int cmd_hips(int argc, char **argv);

/* cmd_jobs.c: the job client. */
int cmd_submit(int argc, char **argv);
int cmd_jobs(int argc, char **argv);
int cmd_cancel(int argc, char **argv);
const char *cmd_jobs_usage(void);

/* cmd_mkstack.c: synthetic stacks of frames for tests and benchmarks. */
int cmd_mkstack(int argc, char **argv);
const char *cmd_mkstack_usage(void);

/* cmd_mosaic.c: mosaics offline (engine/mosaic/mosaic.h). */
int cmd_mosaic(int argc, char **argv);
const char *cmd_mosaic_usage(void);

/* cmd_worker.c: a compute-only cluster node (runs tesserad --worker). */
int cmd_worker(int argc, char **argv);

#endif
