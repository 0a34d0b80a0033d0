"""pyvo (Debian's python3-pyvo) against the IVOA access layer: DataLink, the SODA service
descriptor and its cutouts read with astropy, UWS jobs, VOSI; and HiPS cube tiles against
the cube's planes."""
import io
import os
import subprocess
import tempfile
import time
import unittest
import urllib.parse
import urllib.request
import warnings

from harness import TOP, Server, need

try:
    import numpy as np
    import pyvo
    from astropy import units as u
    from astropy.coordinates import SkyCoord
    from astropy.io import fits
    from astropy.wcs import WCS
    from pyvo.dal.adhoc import SODA_SYNC_IVOID, DatalinkResults, SodaQuery
    from pyvo.io import uws as pyvo_uws
    from pyvo.io import vosi as pyvo_vosi
except ImportError as e:  # pragma: no cover - scripts/setup.sh installs them
    if os.environ.get("CI") == "true":
        raise
    raise unittest.SkipTest(f"pyvo or astropy missing ({e}): scripts/setup.sh")

DEMO = os.path.join(TOP, "data", "demo")


def _no_redirect_opener():
    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):
            return None
    return urllib.request.build_opener(NoRedirect)


def _post_form(url, fields):
    """(status, Location, body) of a form POST, redirects not followed."""
    data = urllib.parse.urlencode(fields).encode()
    req = urllib.request.Request(url, data=data, method="POST", headers={
        "Content-Type": "application/x-www-form-urlencoded"})
    try:
        with _no_redirect_opener().open(req, timeout=30) as r:
            return r.status, r.headers.get("Location"), r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Location"), e.read()


def _open(raw):
    """The HDU list of FITS bytes, with the bytes kept as .raw."""
    hdul = fits.open(io.BytesIO(raw))
    hdul.raw = raw
    return hdul


def _write_wave_cube(path):
    """A 24 x 20 x 12 float32 cube, RA---TAN/DEC--TAN and WAVE (metres) on axis 3, plane
    k holding 1000 k + 10 y + x / 100."""
    z, y, x = np.mgrid[0:12, 0:20, 0:24]
    data = (1000.0 * z + 10.0 * y + x / 100.0).astype(np.float32)
    h = fits.Header()
    for k, v in (("CTYPE1", "RA---TAN"), ("CTYPE2", "DEC--TAN"), ("CTYPE3", "WAVE"),
                 ("CUNIT1", "deg"), ("CUNIT2", "deg"), ("CUNIT3", "m"),
                 ("CRPIX1", 12.5), ("CRPIX2", 10.5), ("CRPIX3", 1.0),
                 ("CRVAL1", 150.0), ("CRVAL2", 2.0), ("CRVAL3", 5.0e-7),
                 ("CDELT1", -0.001), ("CDELT2", 0.001), ("CDELT3", 1.0e-9),
                 ("RADESYS", "ICRS"), ("BUNIT", "K")):
        h[k] = v
    fits.PrimaryHDU(data, h).writeto(path, overwrite=True)
    return data


class TestPyvo(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="tessera-pyvo-")
        cls.cube = _write_wave_cube(os.path.join(cls.tmp, "wavecube.fits"))
        cls.srv = Server(roots=[cls.tmp], datasets=[
            {"name": "wavecube", "path": os.path.join(cls.tmp, "wavecube.fits")}])

    @classmethod
    def tearDownClass(cls):
        cls.srv.stop()
        for f in os.listdir(cls.tmp):
            os.unlink(os.path.join(cls.tmp, f))
        os.rmdir(cls.tmp)

    def links(self, *ids):
        q = "&".join("ID=" + urllib.parse.quote(i) for i in ids)
        return DatalinkResults.from_result_url(self.srv.url("/vo/datalink?" + q))

    # ---- DataLink --------------------------------------------------------------------

    def test_datalink_rows(self):
        dl = self.links("horsehead", "nosuch")
        this = list(dl.bysemantics("#this", include_narrower=False))
        self.assertEqual(len(this), 2)
        ok = [r for r in this if r.id == "horsehead"][0]
        self.assertTrue(ok.access_url.endswith("/api/v1/datasets/horsehead/fits"))
        self.assertEqual(ok.content_type, "application/fits")
        # the primary HDU as stored (HorseHead.fits has an ASCII table after it)
        path = os.path.join(DEMO, "HorseHead.fits")
        with fits.open(path) as hdul:
            info = hdul[0].fileinfo()
            end = info["datLoc"] + info["datSpan"]
        with open(path, "rb") as f:
            want = f.read(end)
        self.assertEqual(ok.content_length, len(want))
        self.assertEqual(ok.getdataset().read(), want)
        bad = [r for r in this if r.id == "nosuch"][0]
        self.assertTrue(bad.error_message.startswith("NotFoundFault: "), bad.error_message)
        preview = next(dl.bysemantics("#preview", include_narrower=False))
        self.assertEqual(preview.content_type, "image/png")
        status, headers, body = self.srv.get(urllib.parse.urlparse(preview.access_url).path)
        self.assertEqual(status, 200)
        self.assertEqual(body[:8], b"\x89PNG\r\n\x1a\n")
        aux = [r.access_url for r in dl.bysemantics("#auxiliary", include_narrower=False)]
        self.assertTrue(any(a.endswith("/hips/horsehead/") for a in aux), aux)
        self.assertTrue(any(a.endswith("/iiif/3/horsehead/info.json") for a in aux), aux)
        for a in aux:
            self.assertEqual(self.srv.get(urllib.parse.urlparse(a).path)[0], 200, a)

    # ---- SODA ------------------------------------------------------------------------

    def _check_cutout(self, hdul, path, z0=0):
        """The cutout's pixels are the file's at its offset, its WCS maps them where the
        file's maps them, and fitsverify finds nothing to say of its bytes."""
        src = fits.open(path)
        cut = hdul[0]
        self.assertEqual(cut.header["BITPIX"], src[0].header["BITPIX"])
        wcs_cut, wcs_src = WCS(cut.header), WCS(src[0].header)
        ny, nx = cut.data.shape[-2:]
        # The offset from the WCS: pixel (0, 0) of the cutout in the file.
        world = wcs_cut.pixel_to_world_values(*([0.0] * wcs_cut.naxis))
        off = np.round(wcs_src.world_to_pixel_values(*world)).astype(int)
        self.assertEqual(off[2] if len(off) > 2 else 0, z0)
        if cut.data.ndim == 2:
            want = src[0].data[off[1]:off[1] + ny, off[0]:off[0] + nx]
        else:
            nz = cut.data.shape[0]
            want = src[0].data[off[2]:off[2] + nz, off[1]:off[1] + ny, off[0]:off[0] + nx]
        np.testing.assert_array_equal(cut.data, want)
        for p in ([0, 0], [nx - 1, ny - 1], [nx / 2, 3.0]):
            pc = p + [0.0] * (wcs_cut.naxis - 2)
            ps = [p[0] + off[0], p[1] + off[1]] + ([z0] if wcs_cut.naxis > 2 else [])
            np.testing.assert_allclose(wcs_cut.pixel_to_world_values(*pc),
                                       wcs_src.pixel_to_world_values(*ps), rtol=0, atol=1e-9)
        self.assertIn("CHECKSUM", cut.header)
        self.assertTrue(cut.verify_checksum() == 1 and cut.verify_datasum() == 1)
        src.close()
        with tempfile.NamedTemporaryFile(suffix=".fits") as f:
            f.write(hdul.raw)
            f.flush()
            out = subprocess.run([need("fitsverify"), f.name], capture_output=True, text=True)
            self.assertIn("0 warning(s) and 0 error(s)", out.stdout, out.stdout[-2000:])
        return off

    def test_soda_descriptor_and_circle(self):
        dl = self.links("horsehead")
        svc = dl.get_adhocservice_by_ivoid(SODA_SYNC_IVOID)
        self.assertTrue(svc.ID == "soda")
        row = next(dl.bysemantics("#cutout", include_narrower=False))
        self.assertEqual(row.service_def, "soda")
        query = SodaQuery.from_resource(row, svc, circle=[85.27, -2.46, 0.02] * u.deg)
        self.assertEqual(query["ID"], "horsehead")
        stream = query.execute_stream()
        query.raise_if_error()
        hdul = _open(stream.read())
        ny, nx = hdul[0].data.shape
        self.assertTrue(40 < nx < 200 and 40 < ny < 200, (nx, ny))
        off = self._check_cutout(hdul, os.path.join(DEMO, "HorseHead.fits"))
        # The circle's centre lies at the centre of the box.
        cx, cy = WCS(hdul[0].header).world_to_pixel_values(85.27, -2.46)
        self.assertLess(abs(cx - (nx - 1) / 2), 1.5)
        self.assertLess(abs(cy - (ny - 1) / 2), 1.5)
        self.assertTrue(off[0] > 0 and off[1] > 0)

    def test_soda_processed_polygon_and_range(self):
        dl = self.links("horsehead")
        row = next(dl.bysemantics("#cutout", include_narrower=False))
        poly = [85.26, -2.47, 85.29, -2.47, 85.29, -2.44] * u.deg
        hdul = _open(row.processed(polygon=poly).read())
        self._check_cutout(hdul, os.path.join(DEMO, "HorseHead.fits"))
        status, headers, body = self.srv.get(
            "/vo/soda/sync?ID=horsehead&POS=" + urllib.parse.quote("RANGE 85.26 85.29 -2.47 -2.44"))
        self.assertEqual(status, 200, body)
        self._check_cutout(_open(body), os.path.join(DEMO, "HorseHead.fits"))

    def test_soda_band_on_a_cube(self):
        dl = self.links("wavecube")
        row = next(dl.bysemantics("#cutout", include_narrower=False))
        # Planes 3..6: 503 nm to 506 nm (plane k at 500 + k nm).
        hdul = _open(row.processed(
            band=[502.5e-9, 506.5e-9] * u.m, circle=[150.0, 2.0, 0.004] * u.deg).read())
        cut = hdul[0]
        self.assertEqual(cut.data.shape[0], 4)
        off = self._check_cutout(hdul, os.path.join(self.tmp, "wavecube.fits"), z0=3)
        np.testing.assert_array_equal(
            cut.data, self.cube[3:7, off[1]:off[1] + cut.data.shape[1],
                                off[0]:off[0] + cut.data.shape[2]])
        self.assertEqual(cut.header["CRPIX3"], 1.0 - 3)
        # POST works as GET.
        status, loc, body = _post_form(self.srv.url("/vo/soda/sync"),
                                       {"ID": "wavecube", "BAND": "5.005e-7 5.015e-7"})
        self.assertEqual(status, 200, body)
        self.assertEqual(fits.open(io.BytesIO(body))[0].data.shape, (1, 20, 24))

    def test_soda_region_holding_the_image(self):
        # A circle larger than the image's hemisphere: the whole image.
        for circle in ("85.27 -2.46 100", "85.27 -2.46 5"):
            status, headers, body = self.srv.get(
                "/vo/soda/sync?ID=horsehead&CIRCLE=" + urllib.parse.quote(circle))
            self.assertEqual(status, 200, body)
            self.assertEqual(fits.open(io.BytesIO(body))[0].data.shape, (893, 891), circle)

    def test_soda_regions_far_and_around(self):
        hh = os.path.join(DEMO, "HorseHead.fits")
        # Small regions 80 to 180 degrees from the image: NoOverlap, not the whole image
        # (their edges lie off the image's TAN projection, or around it).
        for q in ("CIRCLE=0+80+0.01", "CIRCLE=265+2.458+0.01", "CIRCLE=85.27+89+0.01",
                  "POLYGON=0+80+0.01+80+0.01+80.01", "POS=RANGE+0+0.01+80+80.01"):
            status, headers, body = self.srv.get("/vo/soda/sync?ID=horsehead&" + q)
            self.assertEqual(status, 400, (q, len(body)))
            self.assertTrue(body.startswith(b"NoOverlap: "), (q, body[:200]))
        # A cap of 100 degrees around the antipode: its edge, 80 degrees from the image,
        # projects to a ring around it; the region holds none of it.
        status, headers, body = self.srv.get(
            "/vo/soda/sync?ID=horsehead&CIRCLE=" + urllib.parse.quote("265.27 2.46 100"))
        self.assertEqual(status, 400, len(body))
        self.assertTrue(body.startswith(b"NoOverlap: "), body[:200])
        # A polygon of 64 vertices 100 degrees around the image holds all of it.
        vert = [SkyCoord(85.27 * u.deg, -2.46 * u.deg).directional_offset_by(
            k * 360.0 / 64 * u.deg, 100 * u.deg) for k in range(64)]
        poly = " ".join(f"{c.ra.deg:.6f} {c.dec.deg:.6f}" for c in vert)
        status, headers, body = self.srv.get(
            "/vo/soda/sync?ID=horsehead&POLYGON=" + urllib.parse.quote(poly))
        self.assertEqual(status, 200, body[:200])
        self.assertEqual(fits.open(io.BytesIO(body))[0].data.shape, (893, 891))
        # A band of declinations around the whole sky: a strip of rows, every column.
        status, headers, body = self.srv.get(
            "/vo/soda/sync?ID=horsehead&POS=" + urllib.parse.quote("RANGE 0 360 -2.46 -2.45"))
        self.assertEqual(status, 200, body[:200])
        cut = fits.open(io.BytesIO(body))[0]
        ny, nx = cut.data.shape
        self.assertEqual(nx, 891)
        # Every row whose pixel centres in the middle column fall in the band is there,
        # and no more than 2 rows beyond them on either side (the image is sampled every
        # 2 pixels for such regions).
        w = WCS(fits.getheader(hh))
        rows = np.arange(893)
        dec = w.all_pix2world(np.full(893, 445.0), rows, 0)[1]
        want = rows[(dec >= -2.46) & (dec <= -2.45)]
        off = int(round(float(WCS(cut.header).all_world2pix(
            *w.all_pix2world(445.0, float(want[0]), 0), 0)[1])))
        y0 = int(want[0]) - off
        self.assertTrue(y0 <= want[0] and y0 + ny - 1 >= want[-1], (y0, ny, want))
        self.assertLessEqual(ny, len(want) + 4, (ny, len(want)))
        np.testing.assert_array_equal(cut.data, fits.getdata(hh)[y0:y0 + ny, :])
        # 256 vertices at most; more is said.
        many = " ".join(f"{85.27 + 0.01 * np.cos(t):.6f} {-2.46 + 0.01 * np.sin(t):.6f}"
                        for t in np.linspace(0, 2 * np.pi, 300, endpoint=False))
        status, loc, body = _post_form(self.srv.url("/vo/soda/sync"),
                                       {"ID": "horsehead", "POLYGON": many})
        self.assertEqual(status, 400)
        self.assertIn(b"at most 256 vertices", body)
        fewer = " ".join(many.split()[:400])
        status, loc, body = _post_form(self.srv.url("/vo/soda/sync"),
                                       {"ID": "horsehead", "POLYGON": fewer})
        self.assertEqual(status, 200, body[:200])
        ny, nx = fits.open(io.BytesIO(body))[0].data.shape
        self.assertTrue(60 < nx < 90 and 60 < ny < 90, (nx, ny))   # 72" across, ~1"/px

    def test_soda_errors(self):
        cases = [
            ("ID=nosuch&CIRCLE=1+2+3", 404, "NotFoundFault: "),
            ("CIRCLE=1+2+3", 400, "UsageError: "),
            ("ID=horsehead&CIRCLE=1+2", 400, "UsageError: "),
            ("ID=horsehead&CIRCLE=1+2+3&POLYGON=1+2+3+4+5+6", 400, "UsageError: "),
            ("ID=horsehead&CIRCLE=10+20+0.1", 400, "NoOverlap: "),
            # VOPT with the configured rest frequency: its planes lie near 2.72 mm.
            ("ID=l1448_13co&BAND=1e-3+2e-3", 400, "NoOverlap: "),
            ("ID=wavecube&BAND=1e-3+2e-3", 400, "NoOverlap: "),
            ("ID=horsehead&BAND=1e-3+2e-3", 400, "UsageError: "),
            ("ID=horsehead&TIME=1+2", 400, "UsageError: TIME is not served"),
            ("ID=horsehead&POL=I", 400, "UsageError: POL is not served"),
        ]
        for q, status, prefix in cases:
            st, headers, body = self.srv.get("/vo/soda/sync?" + q)
            self.assertEqual(st, status, (q, body))
            self.assertTrue(headers["Content-Type"].startswith("text/plain"), q)
            self.assertTrue(body.decode().startswith(prefix), (q, body))
        # Past 512 parameters (a form: a query that long is a 414 before it is read).
        st, loc, body = _post_form(self.srv.url("/vo/soda/sync"), [("ID", "horsehead")] + [
            (f"X{i}", "1") for i in range(600)])
        self.assertEqual(st, 400, body)
        self.assertTrue(body.startswith(b"UsageError: more than 512 parameters"), body)

    # ---- UWS -------------------------------------------------------------------------

    def _job(self, jid, wait=None):
        q = f"?WAIT={wait}" if wait is not None else ""
        status, headers, body = self.srv.get(f"/vo/uws/jobs/{jid}{q}")
        self.assertEqual(status, 200, body)
        return pyvo_uws.parse_job(io.BytesIO(body))

    def test_uws_job_submitted_and_followed(self):
        status, loc, body = _post_form(self.srv.url("/vo/uws/jobs"), {
            "type": "reduce", "dataset": "wavecube", "op": "mean", "axis": "z",
            "output.name": "uws_mean"})
        self.assertEqual(status, 303, body)
        jid = loc.rsplit("/", 1)[1]
        self.assertTrue(loc.startswith(self.srv.base + "/vo/uws/jobs/"), loc)
        status, loc2, body = _post_form(self.srv.url(f"/vo/uws/jobs/{jid}/phase"),
                                        {"PHASE": "RUN"})
        self.assertEqual((status, loc2), (303, loc))
        job = self._job(jid)
        self.assertEqual(job.jobid, jid)
        self.assertIn(job.phase, ("QUEUED", "EXECUTING", "COMPLETED"))
        params = {p.id_: p.content for p in job.parameters}
        self.assertEqual(params["type"], "reduce")
        self.assertEqual(params["output.name"], "uws_mean")
        end = time.monotonic() + 60
        while job.phase in ("QUEUED", "EXECUTING") and time.monotonic() < end:
            job = self._job(jid, wait=5)
        self.assertEqual(job.phase, "COMPLETED")
        self.assertIsNotNone(job.creationtime)
        self.assertIsNotNone(job.endtime)
        self.assertEqual(self.srv.get(f"/vo/uws/jobs/{jid}/phase")[2].strip(), b"COMPLETED")
        results = list(job.results)
        self.assertEqual(len(results), 1)
        href = results[0].href
        with urllib.request.urlopen(href, timeout=30) as r:
            product = fits.open(io.BytesIO(r.read()))
        np.testing.assert_allclose(product[0].data, self.cube.astype(np.float64).mean(axis=0),
                                   rtol=1e-6)
        status, headers, body = self.srv.get("/vo/uws/jobs")
        self.assertEqual(status, 200)
        # pyvo 1.2.1 warns of the root element "jobs" it has no mapping for, and reads
        # the jobrefs under it.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            jobs = pyvo_uws.parse_job_list(io.BytesIO(body))
        ref = [j for j in jobs if j.jobid == jid]
        self.assertEqual(len(ref), 1)
        self.assertEqual(ref[0].phase, "COMPLETED")
        self.assertEqual(self.srv.get(f"/vo/uws/jobs/{jid}/error")[0], 404)

    def test_uws_errors_abort_and_wait(self):
        status, loc, body = _post_form(self.srv.url("/vo/uws/jobs"), {"type": "no_such"})
        self.assertEqual(status, 400, body)
        self.assertTrue(body.startswith(b"UsageError: "), body)
        self.assertEqual(self.srv.get("/vo/uws/jobs/0123456789abcdef")[0], 404)
        status, loc, body = _post_form(self.srv.url("/vo/uws/jobs"), {
            "type": "power_spectrum", "dataset": "l1448_13co", "output.name": "uws_ps"})
        self.assertEqual(status, 303, body)
        jid = loc.rsplit("/", 1)[1]
        status, loc2, body = _post_form(self.srv.url(f"/vo/uws/jobs/{jid}/phase"),
                                        {"PHASE": "ABORT"})
        self.assertEqual(status, 303, body)
        t0 = time.monotonic()
        job = self._job(jid, wait=3)
        self.assertLess(time.monotonic() - t0, 5)
        self.assertIn(job.phase, ("ABORTED", "COMPLETED"))
        self.assertEqual(_post_form(self.srv.url(f"/vo/uws/jobs/{jid}/phase"),
                                    {"PHASE": "SUSPEND"})[0], 400)

    def test_errors_quote_what_was_sent(self):
        # The value named in an error is the one sent (these once quoted freed memory).
        for i in range(3):
            status, headers, body = self.srv.get(
                "/vo/datalink?ID=horsehead&RESPONSEFORMAT=application/json%d" % i)
            self.assertEqual(status, 400)
            self.assertIn(b"RESPONSEFORMAT 'application/json%d' is not served" % i, body)
        status, loc, body = _post_form(self.srv.url("/vo/uws/jobs"), {
            "type": "reduce", "dataset": "wavecube", "op": "mean", "axis": "z",
            "output.name": "uws_quote"})
        self.assertEqual(status, 303, body)
        jid = loc.rsplit("/", 1)[1]
        for bad in ("abc", "12x", "-5"):
            status, headers, body = self.srv.get(f"/vo/uws/jobs/{jid}?WAIT={bad}")
            self.assertEqual(status, 400)
            self.assertIn(b"got '%s'" % bad.encode(), body)

    def test_uws_list_filters_and_parameters(self):
        ids = []
        for k in range(3):
            status, loc, body = _post_form(self.srv.url("/vo/uws/jobs"), {
                "type": "reduce", "dataset": "wavecube", "op": "mean", "axis": "z",
                "output.name": f"uws_list{k}"})
            self.assertEqual(status, 303, body)
            ids.append(loc.rsplit("/", 1)[1])
            time.sleep(0.01)
        for jid in ids:
            job = self._job(jid)
            end = time.monotonic() + 60
            while job.phase in ("QUEUED", "EXECUTING") and time.monotonic() < end:
                job = self._job(jid, wait=5)
            self.assertEqual(job.phase, "COMPLETED")

        def listed(query):
            status, headers, body = self.srv.get("/vo/uws/jobs" + query)
            self.assertEqual(status, 200, body)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return pyvo_uws.parse_job_list(io.BytesIO(body))

        every = listed("")
        done = listed("?PHASE=COMPLETED")
        self.assertTrue(set(ids) <= {j.jobid for j in done})
        self.assertTrue(all(j.phase == "COMPLETED" for j in done))
        self.assertEqual(listed("?PHASE=EXECUTING&PHASE=QUEUED&PHASE=COMPLETED&PHASE=ERROR"
                                "&PHASE=ABORTED").__len__(), len(every))
        last = listed("?LAST=2")
        self.assertEqual(len(last), 2)
        created = sorted((j.creationtime for j in every), reverse=True)
        self.assertEqual([j.creationtime for j in last], created[:2])
        first = next(j for j in every if j.jobid == ids[0])
        after = first.creationtime.isot + "Z"   # an astropy Time, to the millisecond
        later = {j.jobid for j in listed("?AFTER=" + after)}
        self.assertNotIn(ids[0], later)
        self.assertTrue({ids[1], ids[2]} <= later, (later, ids))
        for q, needle in (("?PHASE=BOGUS", b"PHASE must be"), ("?LAST=-1", b"LAST must be"),
                          ("?LAST=x", b"LAST must be"), ("?AFTER=yesterday", b"AFTER must be")):
            status, headers, body = self.srv.get("/vo/uws/jobs" + q)
            self.assertEqual(status, 400, (q, body))
            self.assertTrue(body.startswith(b"UsageError: ") and needle in body, (q, body))
        status, loc, body = _post_form(self.srv.url("/vo/uws/jobs"),
                                       [("type", "reduce"), ("type", "mosaic")])
        self.assertEqual(status, 400, body)
        self.assertIn(b"'type' is given 2 times", body)
        fields = [("type", "reduce")] + [(f"x{i}", "1") for i in range(600)]
        status, loc, body = _post_form(self.srv.url("/vo/uws/jobs"), fields)
        self.assertEqual(status, 400, body)
        self.assertIn(b"more than 512 parameters", body)

    # ---- VOSI ------------------------------------------------------------------------

    def test_vosi(self):
        status, headers, body = self.srv.get("/vo/capabilities")
        self.assertEqual(status, 200)
        caps = pyvo_vosi.parse_capabilities(io.BytesIO(body))
        ids = {c.standardid: c.interfaces[0].accessurls[0].content for c in caps}
        base = self.srv.base
        self.assertEqual(ids["ivo://ivoa.net/std/SODA#sync-1.0"], base + "/vo/soda/sync")
        self.assertEqual(ids["ivo://ivoa.net/std/DataLink#links-1.1"], base + "/vo/datalink")
        self.assertEqual(ids["ivo://ivoa.net/std/UWS"], base + "/vo/uws/jobs")
        self.assertEqual(ids["ivo://ivoa.net/std/VOSI#availability"], base + "/vo/availability")
        status, headers, body = self.srv.get("/vo/availability")
        avail = pyvo_vosi.parse_availability(io.BytesIO(body))
        self.assertTrue(avail.available)
        self.assertTrue(avail.notes)

    # ---- HiPS cubes ------------------------------------------------------------------

    def test_hips_cube_tiles_are_the_planes(self):
        from astropy_healpix import HEALPix
        status, headers, body = self.srv.get("/hips/wavecube/properties")
        props = dict(line.split("=", 1) for line in body.decode().splitlines() if "=" in line)
        props = {k.strip(): v.strip() for k, v in props.items()}
        self.assertEqual(props["dataproduct_type"], "cube")
        self.assertEqual(props["hips_cube_depth"], "12")
        self.assertEqual(props["hips_cube_firstframe"], "0")
        order = int(props["hips_order"])
        hp = HEALPix(nside=2 ** order, order="nested")
        npix = int(hp.lonlat_to_healpix(150.0 * u.deg, 2.0 * u.deg))
        cel = WCS(fits.getheader(os.path.join(self.tmp, "wavecube.fits"))).celestial
        # Hipsgen's layout: pixel (x, y), y from the bottom, is the nested sub-index with
        # the row from the top in the even bits and the column in the odd bits.
        ys, xs = np.mgrid[0:512, 0:512]
        i, j = 511 - ys, xs
        sub = np.zeros_like(xs)
        for b in range(9):
            sub |= ((i >> b) & 1) << (2 * b) | ((j >> b) & 1) << (2 * b + 1)
        fine = HEALPix(nside=2 ** (order + 9), order="nested")
        lon, lat = fine.healpix_to_lonlat(npix * 512 * 512 + sub)
        px, py = cel.world_to_pixel_values(lon.deg, lat.deg)
        inside = (px > 0.01) & (px < 22.99) & (py > 0.01) & (py < 18.99)
        self.assertGreater(inside.sum(), 300)
        for z in (0, 5, 11):
            path = f"/hips/wavecube/Norder{order}/Dir{npix // 10000 * 10000}/Npix{npix}_{z}.fits"
            status, headers, body = self.srv.get(path)
            self.assertEqual(status, 200, (path, body[:200]))
            tile = fits.open(io.BytesIO(body))[0].data.astype(np.float64)
            # The planes are linear in x and y: bilinear sampling is exact.
            want = 1000.0 * z + 10.0 * py + px / 100.0
            np.testing.assert_allclose(tile[inside], want[inside], rtol=0, atol=2e-3)
            if z == 0:
                plain = self.srv.get(path.replace("_0.fits", ".fits"))[2]
                self.assertEqual(plain, body)
        status, headers, body = self.srv.get(
            f"/hips/wavecube/Norder{order}/Dir{npix // 10000 * 10000}/Npix{npix}_12.fits")
        self.assertEqual(status, 404)
        status, headers, body = self.srv.get("/hips/wavecube/Norder3/Allsky_11.fits")
        self.assertEqual(status, 200)


if __name__ == "__main__":
    unittest.main()
