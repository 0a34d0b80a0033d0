"""Client-test harness: starts tesserad on a free loopback port with a scratch jobs
directory, for tests that drive the server with the field's real clients (astroquery,
pyvo, zarr, dask, fitsverify, promtool ...).

Server(datasets=..., roots=..., extra=...) writes a configuration based on conf/demo.json
(the demo datasets under data/demo, 2 threads) and starts BUILD/tesserad, where BUILD is
$TESSERA_BUILDDIR or the current directory (make check runs in the build tree) or
TOP/build.  Every wait is bounded; stop() ends only the process it started.
"""
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import unittest
import urllib.request

TOP = os.environ.get("TESSERA_SRCDIR") or os.path.abspath(
    os.path.join(os.path.dirname(__file__), "..", ".."))


def tesserad_path():
    """The tesserad binary under test."""
    for d in (os.environ.get("TESSERA_BUILDDIR"), os.getcwd(), os.path.join(TOP, "build")):
        if d and os.path.isfile(os.path.join(d, "tesserad")):
            return os.path.join(d, "tesserad")
    raise unittest.SkipTest("no tesserad built (run scripts/build.sh)")


def need(program):
    """Skips the calling test when PROGRAM is not installed (scripts/setup.sh installs it);
    in CI (CI=true) a missing program is a failure instead."""
    path = shutil.which(program)
    if path:
        return path
    if os.environ.get("CI") == "true":
        raise AssertionError(f"{program} is not installed (scripts/setup.sh)")
    raise unittest.SkipTest(f"{program} is not installed (scripts/setup.sh)")


def need_module(name):
    """Imports and returns the Python module NAME (scripts/setup.sh installs its Debian
    package); a missing one skips the calling test, or fails it in CI, as need() does."""
    import importlib
    try:
        return importlib.import_module(name)
    except ImportError as e:
        if os.environ.get("CI") == "true":
            raise AssertionError(f"python module {name} is not installed (scripts/setup.sh)")
        raise unittest.SkipTest(f"python module {name} is not installed: {e}")


class Server:
    """A tesserad of its own.  datasets: extra dataset entries (appended to the demo's);
    roots: extra data roots; extra: top-level configuration keys merged in (dicts merge one
    level deep).  base is "http://127.0.0.1:PORT"."""

    def __init__(self, datasets=(), roots=(), extra=None, demo=True, args=(), env=None):
        self.dir = tempfile.mkdtemp(prefix="tessera-clients-")
        with open(os.path.join(TOP, "conf", "demo.json")) as f:
            conf = json.load(f)
        if not demo:
            conf["datasets"] = []
        conf["listen"] = "127.0.0.1:0"
        conf["threads"] = 2
        conf["data_roots"] = [os.path.join(TOP, "data", "demo")] + list(roots)
        conf["jobs"] = {"dir": os.path.join(self.dir, "jobs"), "token": None}
        conf["datasets"] = conf["datasets"] + list(datasets)
        for k, v in (extra or {}).items():
            if isinstance(v, dict) and isinstance(conf.get(k), dict):
                conf[k] = {**conf[k], **v}
            else:
                conf[k] = v
        self.conf = conf
        self.conf_path = os.path.join(self.dir, "tessera.json")
        with open(self.conf_path, "w") as f:
            json.dump(conf, f, indent=2)
        self.err_path = os.path.join(self.dir, "stderr.log")
        self._err = open(self.err_path, "wb")
        e = dict(os.environ)
        e.update(env or {})
        self.proc = subprocess.Popen([tesserad_path(), "--config", self.conf_path, *args],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=self._err, env=e)
        self.base = "http://127.0.0.1:%d" % self._wait_port(15.0)

    def _wait_port(self, seconds):
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            m = re.search(r"serving \d+ datasets on http://127\.0\.0\.1:(\d+)/", self.log())
            if m:
                return int(m.group(1))
            if self.proc.poll() is not None:
                raise RuntimeError(f"tesserad exited ({self.proc.returncode}): {self.log()}")
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"tesserad did not listen within {seconds} s: {self.log()}")

    def log(self):
        """What the server wrote to stderr so far (its access and error log)."""
        with open(self.err_path, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def url(self, path):
        return self.base + path

    def get(self, path, headers=None, timeout=30):
        """(status, headers, body bytes) of a GET; HTTP errors are returned, not raised."""
        req = urllib.request.Request(self.url(path), headers=headers or {})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, r.headers, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.headers, e.read()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        self._err.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def need_module(name):
    """Imports and returns the Python module NAME, or skips the calling test when it is not
    installed (scripts/setup.sh installs Debian's python3-NAME); in CI (CI=true) a missing
    module is a failure instead."""
    import importlib
    try:
        return importlib.import_module(name)
    except ImportError:
        if os.environ.get("CI") == "true":
            raise AssertionError(f"Python module {name} is not installed (scripts/setup.sh)")
        raise unittest.SkipTest(f"Python module {name} is not installed (scripts/setup.sh)")
