/* Test helper over the reprojection library: a WCS parsed or the test failed. */
#include "tests/testutil.h"

skywcs *tt_parse_wcs(const char *cards, int nkeys)
{
    skywcs *w = NULL;
    char err[256] = "";
    int rc = skywcs_parse(cards, nkeys, &w, err, sizeof err);
    ck_assert_msg(rc == 0, "skywcs_parse: %s", err);
    return w;
}
