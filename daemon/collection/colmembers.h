/* Member images of the collections opened as datasets (catalog.h, dataset_open_file) for
 * the routes that render the collection's sky (HiPS tiles, cutouts): each opened once
 * and shared, at most COLMEMBERS_OPEN_MAX kept (the least recently used one that no
 * request holds is closed first; more are opened while requests hold them all).  A
 * member whose file changed (its identity in the index) is opened again under its new
 * identity; the old one is closed once no request holds it. */
#ifndef TESSERA_DAEMON_COLLECTION_COLMEMBERS_H
#define TESSERA_DAEMON_COLLECTION_COLMEMBERS_H

#include <stddef.h>
#include "daemon/catalog.h"

struct colset;
struct collection;

#define COLMEMBERS_OPEN_MAX 256

typedef struct colmembers colmembers;

colmembers *colmembers_new(const tess_config *cfg, int max_open);
/* Closes every member (none may be held).  NULL is ignored. */
void colmembers_free(colmembers *m);

/* Member `relpath` of collection c as a dataset named "{collection}/{relpath}", held
 * until colmembers_release.  Returns 0, TESS_ENOTFOUND (no usable member of that path),
 * or the errors of dataset_open_file with err. */
int colmembers_get(struct colset *s, struct collection *c, const char *relpath,
                   const dataset **out, char *err, size_t errlen);
void colmembers_release(struct colset *s, const dataset *d);

/* Scratch buffers of renders (the members of a tile rendered at once), kept between
 * requests so that their pages are not faulted in again: at most COLMEMBERS_SPARE_MAX
 * (of one length) are kept.  take: a buffer of n doubles (a kept one, else malloc'd;
 * NULL when out of memory), its contents undefined; give: back (NULL is ignored), kept
 * or freed. */
#define COLMEMBERS_SPARE_MAX 8
double *colmembers_scratch_take(colmembers *m, size_t n);
void colmembers_scratch_give(colmembers *m, double *p, size_t n);

/* Datasets opened since colmembers_new (a test that members are shared). */
unsigned long long colmembers_opened(const colmembers *m);

#endif
