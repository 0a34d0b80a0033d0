/* GET /zarr/{name}/...: the parsed key of a Zarr v2 / v3 store path (parser of daemon/api/zarr.c). */
#ifndef TESSERA_DAEMON_API_ZARR_H
#define TESSERA_DAEMON_API_ZARR_H

/* What a key names.  The store of a dataset is a group holding the arrays "0" (the
 * dataset at full resolution), "1", "2" ... (its planes reduced by 2, 4 ...) and, once
 * a rechunk job has attached a profile copy, the array "profile" (the level-0 values
 * chunked along z):
 *   .zgroup  .zattrs  .zmetadata           the group (v2; .zmetadata: consolidated)
 *   zarr.json                              the group (v3)
 *   {array}/.zarray  {array}/.zattrs       an array (v2)
 *   {array}/zarr.json                      an array (v3)
 *   {array}/{i}/{j}[/{k}]                  a v2 chunk ('/' separated, numpy axis order)
 *   {array}/c/{i}/{j}[/{k}]                a v3 chunk (default chunk key encoding)
 * Chunk indices are decimal, 0-based, at most 12 digits. */
typedef enum {
    ZARR_KEY_ZGROUP, ZARR_KEY_ZATTRS, ZARR_KEY_ZMETADATA, ZARR_KEY_GROUP_V3,
    ZARR_KEY_ZARRAY, ZARR_KEY_ARRAY_ZATTRS, ZARR_KEY_ARRAY_V3, ZARR_KEY_CHUNK
} zarr_key_kind;

/* The array of a key: a level 0..ZARR_MAX_LEVEL, or ZARR_ARRAY_PROFILE. */
#define ZARR_MAX_LEVEL 30
#define ZARR_ARRAY_PROFILE (-1)

typedef struct zarr_key {
    zarr_key_kind kind;
    int array;                /* the array keys: the level (decimal, no leading zero) or
                                 ZARR_ARRAY_PROFILE */
    int v3;                   /* chunks: 1 for a v3 key ("c/..."), else 0 */
    int nidx;                 /* chunks: 2 or 3 indices */
    long idx[3];              /* chunks: the chunk's grid position, numpy axis order */
} zarr_key;

/* Parses the key `s` (the path after "/zarr/{name}/").  Returns 0, or TESS_ENOTFOUND
 * when it names nothing a store holds (a 404: zarr clients ask for keys that may be
 * absent). */
int zarr_parse_key(const char *s, zarr_key *k);

#endif
