/* The "kind": "collection" entries of the configuration's datasets. */
#include "daemon/collection/collection.h"
#include "engine/base/error.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int colconfig_parse(json_t *d, const char *where, tess_config *c, char *err, size_t errlen)
{
    static const char *const keys[] = {"name", "kind", "images", "hdu", "combine",
                                       "match_background", NULL};
    const char *key;
    json_t *v;
    json_object_foreach(d, key, v) {
        int known = 0;
        for (int i = 0; keys[i]; i++)
            known |= strcmp(key, keys[i]) == 0;
        if (!known) {
            tess_seterr(err, errlen, "%s%s is not a key of a collection (name, kind, images, "
                        "hdu, combine, match_background)", where, key);
            return TESS_EINVAL;
        }
    }
    json_t *kind = json_object_get(d, "kind");
    if (!json_is_string(kind) || strcmp(json_string_value(kind), "collection") != 0) {
        tess_seterr(err, errlen, "%skind must be \"collection\" (other datasets have no kind)",
                    where);
        return TESS_EINVAL;
    }
    json_t *name = json_object_get(d, "name"), *images = json_object_get(d, "images");
    if (!json_is_string(name) || !*json_string_value(name) ||
        strlen(json_string_value(name)) > 64 || strchr(json_string_value(name), '/')) {
        tess_seterr(err, errlen, "%sname must be a string of 1 to 64 bytes without '/'", where);
        return TESS_EINVAL;
    }
    if (!json_is_string(images) || !*json_string_value(images)) {
        tess_seterr(err, errlen, "%simages must be a glob of FITS files under a data root", where);
        return TESS_EINVAL;
    }
    const char *im = json_string_value(images);
    if (strstr(im, "/../") || strncmp(im, "../", 3) == 0 || strcmp(im, "..") == 0) {
        tess_seterr(err, errlen, "%simages must not climb out with '..'", where);
        return TESS_EINVAL;
    }
    json_t *hdu = json_object_get(d, "hdu");
    if (hdu && (!json_is_integer(hdu) || json_integer_value(hdu) < 0 ||
                json_integer_value(hdu) > 1000)) {
        tess_seterr(err, errlen, "%shdu must be an integer 0..1000", where);
        return TESS_EINVAL;
    }
    static const char *const combines[] = {"mean", "median", "first"};
    int combine = 0;
    json_t *cb = json_object_get(d, "combine");
    if (cb) {
        combine = -1;
        for (int i = 0; i < 3 && json_is_string(cb); i++)
            if (strcmp(json_string_value(cb), combines[i]) == 0)
                combine = i;
        if (combine < 0) {
            tess_seterr(err, errlen, "%scombine must be \"mean\", \"median\" or \"first\"", where);
            return TESS_EINVAL;
        }
    }
    json_t *mb = json_object_get(d, "match_background");
    if (mb && !json_is_boolean(mb)) {
        tess_seterr(err, errlen, "%smatch_background must be true or false", where);
        return TESS_EINVAL;
    }
    for (int i = 0; i < c->n_collections; i++)
        if (strcmp(c->collections[i].name, json_string_value(name)) == 0) {
            tess_seterr(err, errlen, "%sname '%s' names two collections", where,
                        json_string_value(name));
            return TESS_EINVAL;
        }
    col_config *nc = realloc(c->collections, (size_t)(c->n_collections + 1) * sizeof(*nc));
    if (!nc)
        return TESS_ENOMEM;
    c->collections = nc;
    col_config *cc = &nc[c->n_collections];
    memset(cc, 0, sizeof(*cc));
    cc->name = strdup(json_string_value(name));
    cc->images = strdup(im);
    if (!cc->name || !cc->images) {
        free(cc->name);
        free(cc->images);
        return TESS_ENOMEM;
    }
    cc->hdu = hdu ? (int)json_integer_value(hdu) : 0;
    cc->combine = combine;
    cc->match_background = mb ? json_is_true(mb) : 0;
    c->n_collections++;
    return 0;
}

void colconfig_release(tess_config *c)
{
    for (int i = 0; i < c->n_collections; i++) {
        free(c->collections[i].name);
        free(c->collections[i].images);
    }
    free(c->collections);
    c->collections = NULL;
    c->n_collections = 0;
}
