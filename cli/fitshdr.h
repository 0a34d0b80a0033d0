/* The CLI's FITS header cards, kept together until engine/fits owns them: the target header, a card lookup, the output headers of `tessera reproject`. */
#ifndef TESSERA_CLI_FITSHDR_H
#define TESSERA_CLI_FITSHDR_H

#include <stddef.h>
#include "engine/sky/plane.h"
#include "engine/sky/reproject.h"

/* Cards are 80 characters each, concatenated without separators (the layout of
 * fitsimg_info.header and of wcspih's input). */

/* The value text of `key` in nkeys cards (quotes and trailing blanks stripped, at most
 * vlen - 1 characters) into val: 1, or 0 when the card is absent. */
int fitshdr_card_value(const char *cards, int nkeys, const char *key, char *val, size_t vlen);

/* Reads the target header: the header of a FITS file (HDU `hdu`, 0-based) or a text file
 * of cards, one a line (up to END; it may start with SIMPLE like a FITS header).  *cards
 * is malloc'd (the caller frees it), *nkeys its cards.  Returns CLI_EXIT_OK, or
 * CLI_EXIT_FAIL after printing why. */
int fitshdr_read_target(const char *path, int hdu, char **cards, int *nkeys);

/* A header under construction: n cards of 80 characters in buf (malloc'd, free it), room
 * for cap.  Start it as { NULL, 0, 0 }. */
typedef struct fitshdr {
    char *buf;
    size_t n, cap;
} fitshdr;

/* What goes into the headers of the output file of `tessera reproject`. */
typedef struct fitshdr_outspec {
    const char *tcards;   /* target header */
    int tkeys;
    const char *in_cards; /* the input's header, for a cube's axis-3 cards when the */
    int in_nkeys;         /* target is 2-D */
    int target_3d;        /* the target header describes the third axis itself */
    rp_dtype dtype;
    long nx, ny, nz;
    rp_method method;
} fitshdr_outspec;

/* Builds the two headers of the output into h0 (HDU 0: the data, with the target's WCS
 * cards) and h1 (HDU 1: FOOTPRINT), each ended with END and padded to whole 2880-byte
 * blocks.  Returns 0 or -1 (out of memory). */
int fitshdr_build_headers(const fitshdr_outspec *o, fitshdr *h0, fitshdr *h1);

#endif
