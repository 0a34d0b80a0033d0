/* Endpoint handlers: each parses into a plain struct, answers or goes async on the pool. */
#ifndef TESSERA_HANDLERS_HANDLERS_H
#define TESSERA_HANDLERS_HANDLERS_H

#include "server/http.h"

/* GET /api/v1/datasets and GET /api/v1/datasets/{name} (datasets.c). */
void handle_datasets_list(hreq *r);
void handle_dataset_info(hreq *r, const dataset *d);

/* /api/v1/jobs[/{id}[/result]] (jobs.c): POST submits, GET lists/inspects, DELETE
 * cancels; `rest` is the part after "/api/v1/jobs". */
void handle_jobs(hreq *r, const char *rest);

/* GET and POST /api/v1/cutout (cutout.c). */
void handle_cutout_get(hreq *r);
void handle_cutout_post(hreq *r);

/* GET /api/v1/datasets/{name}/slice/{rest} (slices.c). */
void handle_slice(hreq *r, const dataset *d, const char *rest);

/* GET /hips/{rest} (hips.c): {name}/ (an index page), properties,
 * Norder{K}/Dir{D}/Npix{N}.{png,jpg,fits}, Norder3/Allsky.{png,jpg,fits}, Moc.fits;
 * `rest` is the part after "/hips/". */
void handle_hips(hreq *r, const char *rest);

/* GET /iiif/3/{rest} (iiif.c): info.json and image requests; `rest` is the part after
 * "/iiif/3/". */
void handle_iiif(hreq *r, const char *rest);

/* Shared by the image handlers: encode a w x h result (row 0 = FITS row 1) as the
 * requested format into r->rep (200), or a problem reply.  `cards` is the WCS of the
 * result for FITS (may be NULL). */
#include "imageio/render.h"
#include "server/params.h"
void reply_image(hreq *r, const double *data, long w, long h, out_format fmt,
                 const render_params *rp, const char *cards, int ncards);

#endif
