"""Sky geometry the client tests share: the WCS of a rotated TAN image, and how far a
position lies from an image."""
import math

import numpy as np
from astropy import units as u
from astropy.coordinates import SkyCoord
from astropy.wcs import WCS


def rotated_tan(ra, dec, n, scale_arcsec, rot_deg):
    """The WCS of an n x n TAN image centred on (ra, dec) degrees, `scale_arcsec` a pixel,
    rotated by `rot_deg` (a CD matrix; east left at rot_deg = 0)."""
    w = WCS(naxis=2)
    w.wcs.ctype = ["RA---TAN", "DEC--TAN"]
    w.wcs.crval = [ra, dec]
    w.wcs.crpix = [(n + 1) / 2.0, (n + 1) / 2.0]
    c, s = math.cos(math.radians(rot_deg)), math.sin(math.radians(rot_deg))
    d = scale_arcsec / 3600.0
    w.wcs.cd = [[-d * c, d * s], [d * s, d * c]]
    return w


def image_distance(w, n, ra, dec):
    """Distance (deg) from (ra, dec) to the n x n image of WCS w: 0 inside (pixel edges
    -0.5 .. n - 0.5), else to its edges sampled four times a pixel."""
    c = SkyCoord(ra * u.deg, dec * u.deg)
    px, py = w.world_to_pixel(c)
    if -0.5 <= float(px) <= n - 0.5 and -0.5 <= float(py) <= n - 0.5:
        return 0.0
    t = np.linspace(-0.5, n - 0.5, 4 * n + 1)
    lo, hi = np.full_like(t, -0.5), np.full_like(t, n - 0.5)
    edge = w.pixel_to_world(np.concatenate([t, hi, t, lo]), np.concatenate([lo, t, hi, t]))
    return float(c.separation(edge).deg.min())
