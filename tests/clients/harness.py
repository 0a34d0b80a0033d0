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
        # The source tree's viewer and npm libraries (the installed paths are tesserad's
        # defaults; conf/demo.json's are relative to conf/).
        conf["viewer"] = {"dir": os.path.join(TOP, "viewer"),
                          "node_modules": os.environ.get("TESSERA_NODE_MODULES")
                          or os.path.join(TOP, "node_modules")}
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
            m = re.search(r"serving \d+ datasets?(?: and \d+ collections?)? on "
                          r"http://127\.0\.0\.1:(\d+)/", self.log())
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

    def job(self, body, seconds=60):
        """POSTs job `body` (202 expected), waits at most `seconds` for it to leave queued
        and running; its final document (AssertionError on another answer or the time)."""
        req = urllib.request.Request(self.url("/api/v1/jobs"), data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as r:
            assert r.status == 202, r.status
            jid = json.loads(r.read())["id"]
        end = time.monotonic() + seconds
        while True:
            doc = json.loads(self.get(f"/api/v1/jobs/{jid}")[2])
            if doc["state"] not in ("queued", "running"):
                return doc
            assert time.monotonic() < end, f"job {body} did not end in {seconds} s"
            time.sleep(0.05)

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


PG_BIN = "/usr/lib/postgresql/15/bin"


class ServerCase(unittest.TestCase):
    """A TestCase over one Server of its class (cls.srv, started by setUpClass) and a
    scratch folder (cls.dir); tearDownClass stops the one and removes the other.
    cls.np is numpy where the class loaded it (need_module)."""

    @classmethod
    def tearDownClass(cls):
        if getattr(cls, "srv", None):
            cls.srv.stop()
        if getattr(cls, "dir", None):
            shutil.rmtree(cls.dir, ignore_errors=True)

    def get(self, path, status=200):
        """(headers, body) of a GET that must answer `status`."""
        st, headers, body = self.srv.get(path)
        self.assertEqual(st, status, f"{path}: {body[:300]!r}")
        return headers, body

    def npy(self, path):
        import io
        return self.np.load(io.BytesIO(self.get(path)[1]))

    def job(self, body, seconds=60):
        """POSTs job `body`, waits (at most `seconds`) for it to succeed; its final document."""
        doc = self.srv.job(body, seconds)
        self.assertEqual(doc["state"], "succeeded", doc)
        return doc


def _pg_program(name):
    path = os.path.join(PG_BIN, name)
    if os.path.isfile(path):
        return path
    return need(name)


def free_port():
    """A loopback TCP port free at the time of the call."""
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Postgres:
    """A throwaway PostgreSQL cluster (initdb + pg_ctl) in a temporary directory, reached
    only through a Unix socket in that directory (listen_addresses = ''), trust
    authentication for its one role.  Run as root, it runs as the unprivileged user
    `nobody` (the directory is given to it).  uri(db) creates database db and returns its
    libpq URI; query(db, sql) returns the rows of a query there."""

    def __init__(self):
        self.initdb = _pg_program("initdb")
        self.pg_ctl = _pg_program("pg_ctl")
        self.createdb = _pg_program("createdb")
        self.dir = tempfile.mkdtemp(prefix="tessera-pg-")
        self.data = os.path.join(self.dir, "data")
        self.log = os.path.join(self.dir, "postgres.log")
        self.prefix = []
        if os.geteuid() == 0:
            import pwd
            nobody = pwd.getpwnam("nobody")
            os.chown(self.dir, nobody.pw_uid, nobody.pw_gid)
            os.chmod(self.dir, 0o700)
            self.prefix = ["runuser", "-u", "nobody", "--"]
        self._run([self.initdb, "-D", self.data, "-U", "tessera", "--auth=trust",
                   "--no-sync", "-E", "UTF8"])
        with open(os.path.join(self.data, "postgresql.conf"), "a") as f:
            f.write("listen_addresses = ''\nunix_socket_directories = '%s'\n"
                    "fsync = off\nmax_connections = 100\n" % self.dir)
        self.start()

    def _run(self, args, check=True):
        return subprocess.run(self.prefix + args, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, timeout=60, check=check, cwd=self.dir)

    def start(self):
        self._run([self.pg_ctl, "-D", self.data, "-l", self.log, "-w", "-t", "30", "start"])

    def stop(self, mode="fast"):
        self._run([self.pg_ctl, "-D", self.data, "-m", mode, "-w", "-t", "30", "stop"],
                  check=False)

    def _pids(self):
        """The postmaster's pid and those of its children (the backends, its helpers)."""
        with open(os.path.join(self.data, "postmaster.pid")) as f:
            pm = int(f.readline())
        kids = []
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            try:
                with open("/proc/%s/stat" % d) as f:
                    st = f.read()
                ppid = int(st[st.rindex(")") + 2:].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            if ppid == pm:
                kids.append(int(d))
        return pm, kids

    def freeze(self):
        """SIGSTOP of the postmaster, then of every backend it has (as a hung host or a
        network partition): connections stay open, nothing answers.  thaw() undoes it;
        close() does too."""
        pm, _ = self._pids()
        os.kill(pm, signal.SIGSTOP)
        self.frozen = [pm]
        _, kids = self._pids()   # the postmaster forks no more
        for k in kids:
            try:
                os.kill(k, signal.SIGSTOP)
                self.frozen.append(k)
            except ProcessLookupError:
                pass

    def thaw(self):
        for p in getattr(self, "frozen", []):
            try:
                os.kill(p, signal.SIGCONT)
            except ProcessLookupError:
                pass
        self.frozen = []

    def uri(self, db):
        self._run([self.createdb, "-h", self.dir, "-U", "tessera", db])
        return "postgresql:///%s?host=%s&user=tessera" % (db, self.dir)

    def query(self, db, sql):
        """The rows of `sql` in database db (psql, unaligned): a list of lists of str."""
        r = subprocess.run(self.prefix + [_pg_program("psql"), "-h", self.dir, "-U",
                                          "tessera", "-d", db, "-X", "-A", "-t", "-q",
                                          "-v", "ON_ERROR_STOP=1", "-c", sql],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60,
                           check=True, cwd=self.dir)
        return [line.split("|") for line in r.stdout.decode().splitlines() if line]

    def close(self):
        self.thaw()
        self.stop("immediate")
        shutil.rmtree(self.dir, ignore_errors=True)


class Nginx:
    """nginx in front of `upstreams` ("127.0.0.1:PORT" each) with the cluster configuration's
    upstream rules (conf/cluster/nginx.conf: hash $request_uri consistent,
    proxy_next_upstream), on a free loopback port, in the foreground (daemon off), with
    its pid file, logs and temporary files in a temporary directory."""

    def __init__(self, upstreams):
        self.program = need("nginx")
        self.dir = tempfile.mkdtemp(prefix="tessera-nginx-")
        self.port = free_port()
        servers = "".join("        server %s max_fails=1 fail_timeout=5s;\n" % u
                          for u in upstreams)
        d = self.dir
        conf = f"""daemon off;
worker_processes 1;
pid {d}/nginx.pid;
error_log {d}/error.log warn;
events {{ worker_connections 256; }}
http {{
    access_log off;
    client_body_temp_path {d}/body;
    proxy_temp_path {d}/proxy;
    fastcgi_temp_path {d}/fastcgi;
    uwsgi_temp_path {d}/uwsgi;
    scgi_temp_path {d}/scgi;
    upstream tessera {{
        hash $request_uri consistent;
{servers}        keepalive 16;
    }}
    server {{
        listen 127.0.0.1:{self.port};
        location / {{
            proxy_pass http://tessera;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_next_upstream error timeout http_502 http_503 http_504;
            proxy_next_upstream_tries 3;
            proxy_connect_timeout 2s;
            proxy_read_timeout 60s;
        }}
    }}
}}
"""
        self.conf_path = os.path.join(d, "nginx.conf")
        with open(self.conf_path, "w") as f:
            f.write(conf)
        self._err = open(os.path.join(d, "stderr.log"), "wb")
        self.proc = subprocess.Popen([self.program, "-p", d, "-c", self.conf_path],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=self._err)
        self.base = "http://127.0.0.1:%d" % self.port
        end = time.monotonic() + 10
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise RuntimeError("nginx exited: " + open(os.path.join(d, "error.log")).read())
            try:
                urllib.request.urlopen(self.base + "/healthz", timeout=2).read()
                return
            except Exception:
                time.sleep(0.1)
        self.close()
        raise RuntimeError("nginx did not answer within 10 s")

    def get(self, path, timeout=30):
        try:
            with urllib.request.urlopen(self.base + path, timeout=timeout) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def close(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGQUIT)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        self._err.close()
        shutil.rmtree(self.dir, ignore_errors=True)
