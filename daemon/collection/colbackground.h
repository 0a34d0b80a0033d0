/* Background matching of a collection (`"match_background": true`): one additive offset
 * per member image, solved once for the collection and kept in the index, subtracted
 * when members are combined (HiPS tiles and Allsky, cutouts and hips2fits).
 *
 * Method (Montage mBgModel's, levels only): for every pair of usable members whose
 * footprints (the index's polygons) overlap, member b is reprojected onto member a's
 * pixel grid (rp_reproject, bilinear, footprint 1) and the differences a - b on the
 * pixels both cover (at most about 2^20 of them, rows and columns subsampled alike) are
 * reduced to one level by mos_bg_fit_level (the mean with three passes of 3-sigma
 * clipping: point sources and edges fall out); then mos_bg_solve_levels finds the
 * offsets o minimising sum over pairs of n (o_a - o_b - d_ab)^2, n the points kept,
 * with the mean offset of each connected group of members zero (the gauge: the combined
 * sky keeps the members' mean level).  A member overlapping no other gets 0.  Offsets
 * are in the members' pixel units (BSCALE/BZERO applied).
 *
 * Kept in the index (colindex.h): each pair's d and n (col_bgpair) and each member's
 * offset (col_image.bg_offset).  A new, changed or removed member deletes its pairs and
 * its offset (colindex_put/remove), so an update measures only the pairs of the members
 * that changed and solves again from every stored pair (cheap: O(pairs) a CG iteration).
 * Updates run on the collections' background thread (collection.c rescan_main), never
 * on an HTTP thread: after the start and after every scan that changed a member.
 *
 * While the offsets do not match the current members (before the first solve, and
 * between a scan that changed a member and the update after it) the sky routes of the
 * collection answer 503 with Retry-After (colbg_pending); every answer made is made with
 * one solution, and the cache key (collection_version) changes with each solve. */
#ifndef TESSERA_DAEMON_COLLECTION_COLBACKGROUND_H
#define TESSERA_DAEMON_COLLECTION_COLBACKGROUND_H

struct colset;
struct collection;

/* Seconds a 503 of a collection waiting for its offsets asks the client to wait. */
#define COLBG_RETRY_AFTER_S 2

/* Members larger than this many pixels are not measured (their pairs count as no
 * constraint: offset 0 unless other pairs tie them).  The two planes of a pair are read
 * whole as doubles, with b reprojected onto a as doubles and its footprint as floats: an
 * update holds at most 28 bytes x COLBG_MAX_PIXELS (about 450 MB) at once, one pair at a
 * time, on one thread. */
#define COLBG_MAX_PIXELS (16L * 1024 * 1024)

/* 1 when c matches backgrounds and its offsets are not those of its current members
 * (the sky routes answer 503), else 0. */
int colbg_pending(struct collection *c);

/* The offset to subtract from member `relpath` of c (0 without match_background, or for
 * a member without one).  Read under c's lock. */
double colbg_offset(struct collection *c, const char *relpath);

/* The offsets of members rel[0..n) into out[0..n), all of one solution (read under one
 * lock; 0 for a member without one, or all 0 without match_background).  Returns 0, or 1
 * when c is pending (colbg_pending; out untouched). */
int colbg_offsets(struct collection *c, char *const *rel, int n, double *out);

/* As colbg_offsets, of one given solution: with `sky` not 0, 1 (out untouched) also when
 * c's collection_version is no longer `sky` (a solve or a scan since), so that every
 * tile of one answer (an Allsky's 12 faces, a tile made from its children) subtracts the
 * offsets of the solution its cache key names. */
int colbg_offsets_at(struct collection *c, char *const *rel, int n, double *out,
                     unsigned long long sky);

/* After the members were loaded from the index: the offsets stored there are the
 * solution when every usable member has one (then colbg_pending is 0 at once). */
void colbg_loaded(struct collection *c);

/* Measures the pairs the index lacks, solves, stores the offsets in the index and in
 * c's members (when the members did not change meanwhile: else it is pending still).
 * Called by the background thread (and tests).  Returns 0, or TESS_EIO / TESS_ENOMEM
 * (nothing changed in memory), or TESS_ECANCELED when the set is stopping. */
int colbg_update(struct colset *s, struct collection *c);

/* Pairs measured (images reprojected) by this process (tests: an update after one
 * member changed measures only its pairs). */
unsigned long long colbg_pairs_measured(void);

#endif
