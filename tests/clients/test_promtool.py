"""/metrics passes Prometheus's promtool check metrics (every family with HELP and TYPE,
names and types as Prometheus's conventions ask), with the disk cache and jobs enabled so
that every family is there."""
import shutil
import subprocess
import tempfile
import unittest

from harness import Server, need


class PromtoolTest(unittest.TestCase):
    def test_check_metrics(self):
        promtool = need("promtool")
        disk = tempfile.mkdtemp(prefix="tessera-promtool-")
        srv = Server(extra={"cache": {"disk_dir": disk, "disk_mb": 16}})
        try:
            for p in ("/healthz", "/api/v1/datasets", "/hips/horsehead/properties",
                      "/api/v1/datasets/nosuch",
                      "/api/v1/cutout?dataset=horsehead&ra=85.25&dec=-2.46&fov=0.1&width=32"
                      "&height=32", "/api/v1/jobs"):
                srv.get(p)
            status, _, body = srv.get("/metrics")
            self.assertEqual(status, 200)
            text = body.decode()
            for family in ("tessera_cache_hits_total", "tessera_cache_misses_total",
                           "tessera_cache_bytes", "tessera_pool_queue_depth",
                           "tessera_disk_cache_bytes", "tessera_jobs"):
                self.assertIn("# HELP %s " % family, text)
            r = subprocess.run([promtool, "check", "metrics"], input=body,
                               capture_output=True, timeout=60)
            self.assertEqual(r.returncode, 0, (r.stdout + r.stderr).decode())
            self.assertEqual((r.stdout + r.stderr).decode().strip(), "")
        finally:
            srv.stop()
            shutil.rmtree(disk, ignore_errors=True)


if __name__ == "__main__":
    unittest.main()
