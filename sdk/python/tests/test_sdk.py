"""The SDK against a real spaced (SPACE_URL, SPACE_API_KEY: a tenant key);
e2e/python_sdk_test.go starts the server and runs this."""
import os
import sys
import tempfile
import time
import unittest
import uuid

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import space  # noqa: E402

RUN = uuid.uuid4().hex[:8]


def client():
    return space.Client(timeout=180)


class SandboxTest(unittest.TestCase):
    """Commands and files on one shared sandbox."""

    @classmethod
    def setUpClass(cls):
        cls.client = client()
        cls.sb = cls.client.sandboxes.create(template="base", metadata={"suite": "sdk", "run": RUN},
                                             env={"GREETING": "hi"}, timeout_seconds=1800)

    @classmethod
    def tearDownClass(cls):
        cls.sb.delete()

    def test_created_running(self):
        self.assertTrue(self.sb.id.startswith("sbx_"))
        self.assertEqual(self.sb.state, "running")
        self.assertEqual(self.client.sandboxes.get(self.sb.id).metadata["run"], RUN)

    def test_run_argv_and_shell(self):
        r = self.sb.run(["echo", "hello", "world"])
        self.assertEqual((r.exit_code, r.stdout, r.stderr, r.reason), (0, b"hello world\n", b"", "exited"))
        r = self.sb.run("echo $GREETING $X; echo oops >&2; exit 7", env={"X": "there"}, cwd="/tmp")
        self.assertEqual((r.exit_code, r.stdout, r.stderr), (7, b"hi there\n", b"oops\n"))
        self.assertEqual(self.sb.run("pwd", cwd="/tmp").stdout, b"/tmp\n")

    def test_run_stdin_callbacks_and_binary(self):
        got = []
        r = self.sb.run("cat; printf '\\377\\000' >&2", stdin=b"piped in", on_stdout=got.append)
        self.assertEqual(r.stdout, b"piped in")
        self.assertEqual(b"".join(got), b"piped in")
        self.assertEqual(r.stderr, b"\xff\x00")

    def test_run_timeout(self):
        r = self.sb.run("sleep 60", timeout=1)
        self.assertEqual(r.reason, "timeout")
        self.assertIsNone(r.exit_code)

    def test_start_iterate_reattach(self):
        cmd = self.sb.start("for i in 1 2 3 4 5; do echo line$i; sleep 0.3; done")
        seen = []
        dropped = False
        for ev in cmd:
            if ev.type == "stdout":
                seen.append(ev.data)
                if not dropped:
                    # Drop the connection under the iterator: it must
                    # reattach after the last event and lose nothing.
                    dropped = True
                    cmd._stream._resp.fp.raw._sock.shutdown(2)
        self.assertTrue(dropped)
        self.assertEqual(b"".join(seen), b"".join(b"line%d\n" % i for i in range(1, 6)))
        self.assertEqual(cmd.exit.exit_code, 0)
        # A new handle reattaches from the start and replays everything.
        again = self.sb.command(cmd.id).wait()
        self.assertEqual(again.stdout, b"".join(seen))

    def test_command_stdin_and_signal(self):
        cmd = self.sb.start(["cat"], stdin=True)
        cmd.send_stdin("one ")
        cmd.send_stdin(b"two")
        cmd.close_stdin()
        self.assertEqual(cmd.wait().stdout, b"one two")
        cmd = self.sb.start("sleep 60")
        cmd.kill()
        r = cmd.wait()
        self.assertEqual((r.exit_code, r.signal), (None, "SIGKILL"))

    def test_files(self):
        f = self.sb.files
        info = f.write("/root/sdk/dir/a.txt", "alpha\n", mode=0o600)
        self.assertEqual((info.size, info.mode), (6, "0600"))
        f.write("/root/sdk/dir/b.bin", bytes(range(256)))
        self.assertEqual(f.read("/root/sdk/dir/a.txt"), b"alpha\n")
        self.assertEqual(f.read("/root/sdk/dir/b.bin"), bytes(range(256)))
        names = {e.name: e for e in f.list("/root/sdk/dir")}
        self.assertEqual(set(names), {"a.txt", "b.bin"})
        self.assertEqual((names["b.bin"].type, names["b.bin"].size), ("file", 256))
        self.assertIsNotNone(names["a.txt"].mtime)
        self.assertEqual(self.sb.run("cat /root/sdk/dir/a.txt").stdout, b"alpha\n")
        f.delete("/root/sdk/dir/a.txt")
        with self.assertRaises(space.NotFound):
            f.read("/root/sdk/dir/a.txt")
        f.delete("/root/sdk", recursive=True)
        with self.assertRaises(space.NotFound):
            f.list("/root/sdk")

    def test_upload_download_dir(self):
        with tempfile.TemporaryDirectory() as src, tempfile.TemporaryDirectory() as dst:
            os.makedirs(os.path.join(src, "sub"))
            with open(os.path.join(src, "top.txt"), "w") as fh:
                fh.write("top")
            with open(os.path.join(src, "sub", "deep.txt"), "w") as fh:
                fh.write("deep")
            self.sb.files.upload_dir(src, "/root/tree")
            self.assertEqual(self.sb.run("cat /root/tree/top.txt /root/tree/sub/deep.txt").stdout, b"topdeep")
            self.sb.run("echo made-inside > /root/tree/sub/new.txt")
            self.sb.files.download_dir("/root/tree", dst)
            with open(os.path.join(dst, "sub", "new.txt")) as fh:
                self.assertEqual(fh.read(), "made-inside\n")
            with open(os.path.join(dst, "top.txt")) as fh:
                self.assertEqual(fh.read(), "top")

    def test_errors(self):
        with self.assertRaises(space.NotFound) as cm:
            self.client.sandboxes.get("sbx_doesnotexist")
        e = cm.exception
        self.assertIsInstance(e, space.Error)
        self.assertEqual(e.code, "not_found")
        self.assertTrue(e.message)
        self.assertTrue(e.request_id)
        with self.assertRaises(space.InvalidArgument) as cm:
            self.sb.files.read("relative/path")
        self.assertIn("path", cm.exception.message)
        with self.assertRaises(space.InvalidArgument):
            self.client.sandboxes.create(template="base", vcpus=-1)
        with self.assertRaises(space.Unauthenticated):
            space.Client(api_key="bogus").sandboxes.get(self.sb.id)

    def test_set_network(self):
        policy = {"egress": {"default": "deny", "allow": ["example.com"]}}
        sb = self.sb.set_network(policy)
        self.assertEqual(sb.data["network"]["egress"]["allow"], ["example.com"])
        self.assertEqual(self.client.sandboxes.get(self.sb.id).data["network"]["egress"]["allow"], ["example.com"])

    def test_keep(self):
        before = self.sb.refresh().expires_at
        self.sb.keep(3600)
        self.assertIsNotNone(self.sb.expires_at)
        if before is not None:
            self.assertGreater(self.sb.expires_at, before)


class LifecycleTest(unittest.TestCase):
    def test_pause_wake_checkpoint_restore_branch_list(self):
        c = client()
        with c.sandboxes.create(metadata={"suite": "sdk-life", "run": RUN}) as sb:
            sb.files.write("/root/state.txt", "before")
            sb.pause()
            self.assertEqual(sb.state, "paused")
            with self.assertRaises(space.Conflict) as cm:
                sb.run("true")
            self.assertEqual(cm.exception.details.get("state"), "paused")
            sb.wake()
            self.assertEqual(sb.state, "running")
            ck = sb.checkpoint("sdk-one")
            self.assertTrue(ck.id.startswith("ckpt_"))
            self.assertEqual((ck.name, ck.sandbox), ("sdk-one", sb.id))
            self.assertIn(ck.id, [x.id for x in sb.checkpoints()])
            sb.files.write("/root/state.txt", "after")
            sb.restore(ck)
            self.assertEqual(sb.state, "running")
            self.assertEqual(sb.files.read("/root/state.txt"), b"before")
            with sb.branch(ck, metadata={"suite": "sdk-life", "run": RUN}) as br:
                self.assertNotEqual(br.id, sb.id)
                self.assertEqual(br.files.read("/root/state.txt"), b"before")
                br.files.write("/root/state.txt", "branch")
                self.assertEqual(sb.files.read("/root/state.txt"), b"before")
                # Listing walks every page (page_size=1: one sandbox a page).
                ids = [s.id for s in c.sandboxes.list(metadata={"suite": "sdk-life", "run": RUN}, page_size=1)]
                self.assertEqual(sorted(ids), sorted([sb.id, br.id]))
                running = [s.id for s in c.sandboxes.list(state="running", metadata={"run": RUN})]
                self.assertIn(br.id, running)
            self.assertEqual(br.state, "deleted")
            sb.suspend()
            self.assertEqual(sb.state, "suspended")
            sb.wake()
            self.assertEqual(sb.files.read("/root/state.txt"), b"before")
        self.assertEqual(sb.state, "deleted")
        self.assertEqual(c.sandboxes.get(sb.id).state, "deleted")


class CatalogTest(unittest.TestCase):
    def test_templates(self):
        c = client()
        names = [t.name for t in c.templates.list()]
        self.assertIn("base", names)
        base = c.templates.get("base")
        self.assertEqual(base.state, "ready")
        self.assertTrue(base.digest.startswith("sha256:"))
        self.assertEqual(c.templates.get(f"base@{base.digest}").id, base.id)
        with self.assertRaises(space.NotFound):
            c.templates.get("no-such-template")

    def test_template_build(self):
        imports = os.environ.get("SPACE_TEMPLATE_IMPORTS")
        if not imports:
            self.skipTest("set SPACE_TEMPLATE_IMPORTS to a template source root of the server")
        import io
        import tarfile
        path = os.path.join(imports, f"sdk-{RUN}.tar")
        with tarfile.open(path, "w") as tar:
            for d in ("etc", "work"):
                ti = tarfile.TarInfo(d)
                ti.type, ti.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(ti)
            body = b"from the sdk\n"
            ti = tarfile.TarInfo("etc/tiny")
            ti.size = len(body)
            tar.addfile(ti, io.BytesIO(body))
        c = client()
        name = "sdk-tiny-" + RUN
        lines = []
        tpl = c.templates.build(name, {"type": "rootfs", "path": path},
                                defaults={"memory_mib": 192, "env": {"WHO": "tiny"}}, on_progress=lines.append,
                                timeout=900)
        try:
            self.assertEqual((tpl.name, tpl.state), (name, "ready"))
            self.assertTrue(tpl.digest.startswith("sha256:"))
            self.assertTrue(any("snapshot: ready" in line for line in lines), lines)
            self.assertIn(name, [t.name for t in c.templates.list()])
            with c.sandboxes.create(template=name) as sb:
                self.assertEqual(sb.data["memory_mib"], 192)
                self.assertEqual(sb.run('echo "$(cat /etc/tiny) $WHO"').stdout, b"from the sdk tiny\n")
        finally:
            c.templates.delete(name)
            os.remove(path)
        with self.assertRaises(space.NotFound):
            c.templates.get(name)

    def test_secrets(self):
        c = client()
        name = "sdk-" + RUN
        c.secrets.put(name, "s3cret")
        c.secrets.put(name, "s3cret-2")
        listed = [s for s in c.secrets.list() if s.name == name]
        self.assertEqual(len(listed), 1)
        self.assertIsNotNone(listed[0].updated_at)
        self.assertFalse(hasattr(listed[0], "value"))
        c.secrets.delete(name)
        self.assertNotIn(name, [s.name for s in c.secrets.list()])
        with self.assertRaises(space.NotFound):
            c.secrets.delete(name)

    def test_idempotent_create(self):
        # The transport's own key is per call; a caller's key repeats the
        # first answer (the retry path is in test_transport).
        c = client()
        key = "sdk-idem-" + RUN
        a = c._t.call("POST", "/v1/sandboxes", body={"template": "base", "metadata": {"run": RUN}},
                      headers={"Idempotency-Key": key})
        b = c._t.call("POST", "/v1/sandboxes", body={"template": "base", "metadata": {"run": RUN}},
                      headers={"Idempotency-Key": key})
        self.assertEqual(a["sandbox"]["id"], b["sandbox"]["id"])
        sb = c.sandboxes.get(a["sandbox"]["id"])
        space._ops.wait_operation(c._t, a["operation"], 600)
        sb.delete()


def fetch(url, headers=None):
    """GETs url through the SPACE server's own address (SPACE_URL) with the
    URL's host as Host, so a preview domain need not resolve here; returns
    (status, headers, body) without following redirects."""
    import http.client
    import urllib.parse
    srv = urllib.parse.urlsplit(os.environ.get("SPACE_URL", space.DEFAULT_URL))
    u = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(srv.hostname, srv.port, timeout=60)
    try:
        conn.request("GET", (u.path or "/") + ("?" + u.query if u.query else ""),
                     headers={"Host": u.netloc, **(headers or {})})
        resp = conn.getresponse()
        return resp.status, resp.headers, resp.read()
    finally:
        conn.close()


class PortsTest(unittest.TestCase):
    """sb.ports against busybox httpd in the guest, through the preview proxy."""

    def test_list_and_urls(self):
        c = client()
        with c.sandboxes.create(template="base", metadata={"suite": "sdk-ports", "run": RUN}) as sb:
            self.assertEqual([p for p in sb.ports.list() if p.port == 8080], [])
            sb.start("mkdir -p /root/www && echo hello-port > /root/www/index.html && "
                     "exec busybox httpd -f -p 8080 -h /root/www")
            deadline = time.monotonic() + 60
            while not any(p.port == 8080 for p in sb.ports.list()):
                self.assertLess(time.monotonic(), deadline, "httpd never listened on 8080")
                time.sleep(0.2)
            p = [p for p in sb.ports.list() if p.port == 8080][0]
            self.assertEqual(p.protocol, "tcp")
            self.assertTrue(p.address)

            priv = sb.ports.url(8080, ttl_seconds=600)
            self.assertFalse(priv.public)
            self.assertTrue(priv.token)
            self.assertIn(f"8080-{sb.id}.", priv.url)
            self.assertIsNotNone(priv.expires_at)
            status, _, body = fetch(priv.url, priv.headers)
            self.assertEqual((status, body), (200, b"hello-port\n"))
            status, _, _ = fetch(priv.url)
            self.assertEqual(status, 401)
            status, _, _ = fetch(priv.url, {space.ports.TOKEN_HEADER: "wrong-token"})
            self.assertEqual(status, 401)
            # The browser form trades the token for a cookie and redirects.
            status, hdrs, _ = fetch(priv.browser_url)
            self.assertIn(status, (302, 303, 307))
            self.assertNotIn("space_token", hdrs.get("Location", ""))
            cookie = hdrs.get("Set-Cookie", "")
            self.assertIn("HttpOnly", cookie)
            status, _, body = fetch(priv.url, {"Cookie": cookie.split(";", 1)[0]})
            self.assertEqual((status, body), (200, b"hello-port\n"))

            pub = sb.ports.url(8080, public=True)
            self.assertTrue(pub.public)
            self.assertEqual(pub.headers, {})
            status, _, body = fetch(pub.url)
            self.assertEqual((status, body), (200, b"hello-port\n"))

            # Nothing listens on 8081: the proxy answers 502 with a JSON body.
            idle = sb.ports.url(8081, public=True)
            status, _, body = fetch(idle.url)
            self.assertEqual(status, 502)
            self.assertIn(b"error", body)

            for bad in (0, 65536, -1, True):
                with self.assertRaises(space.InvalidArgument):
                    sb.ports.url(bad)
            with self.assertRaises(space.InvalidArgument):
                c._t.call("POST", f"/v1/sandboxes/{sb.id}/ports/0/urls", body={})
        with self.assertRaises(space.NotFound):
            space.Sandbox(c.sandboxes, {"id": "sbx_doesnotexist"}).ports.list()


if __name__ == "__main__":
    unittest.main()
