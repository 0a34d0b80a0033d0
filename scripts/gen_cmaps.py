#!/usr/bin/python3
"""Writes engine/image/cmap_mpl.h: the colour maps of matplotlib that Tessera renders
from full tables (Greys, coolwarm, RdBu, twilight and twilight_r, turbo, jet), each as
256 RGB bytes, entry i the colour of t = i/255 (matplotlib.colormaps[name](i / 255),
times 255, rounded).  Run with Debian's python3-matplotlib (scripts/setup.sh):

    /usr/bin/python3 scripts/gen_cmaps.py > engine/image/cmap_mpl.h

tests/clients/test_cmaps.py checks every map Tessera renders against matplotlib."""
import sys

import matplotlib
import numpy as np

# twilight_r has a table of its own: twilight lists 510 colours, so its reversal is not
# the 256-entry table read backwards (entry 509 - 2i, not 510 - 2i); the others' are.
MAPS = ["Greys", "coolwarm", "RdBu", "twilight", "twilight_r", "turbo", "jet"]


def main():
    out = sys.stdout
    out.write("/* Colour maps of matplotlib as 256-entry tables, for engine/image/render.c. */\n")
    out.write("#ifndef TESSERA_ENGINE_IMAGE_CMAP_MPL_H\n#define TESSERA_ENGINE_IMAGE_CMAP_MPL_H\n\n")
    out.write("#include <stdint.h>\n\n")
    out.write("/* Written by scripts/gen_cmaps.py from matplotlib %s (do not edit): entry i\n"
              " * of each table is colormaps[name](i / 255) times 255, rounded.  Greys and RdBu\n"
              " * are ColorBrewer schemes, coolwarm is Kenneth Moreland's diverging map,\n"
              " * twilight Bastian Bechtold's cyclic map and turbo Google's, as matplotlib\n"
              " * ships them. */\n\n" % matplotlib.__version__)
    t = np.arange(256) / 255.0
    for name in MAPS:
        rgb = np.rint(matplotlib.colormaps[name](t)[:, :3] * 255.0).astype(int)
        out.write("static const uint8_t cmap_mpl_%s[256][3] = {\n" % name.lower())
        for i in range(0, 256, 4):
            row = ", ".join("{%d, %d, %d}" % tuple(rgb[k]) for k in range(i, i + 4))
            out.write("    %s,\n" % row)
        out.write("};\n\n")
    out.write("#endif\n")


if __name__ == "__main__":
    main()
