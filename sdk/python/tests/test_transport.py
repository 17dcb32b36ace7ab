"""The transport's retry rules, against a local HTTP server that misbehaves
on purpose (a real spaced does not drop connections on request)."""
import http.server
import json
import os
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import space  # noqa: E402
from space._http import Transport  # noqa: E402


class Flaky(http.server.BaseHTTPRequestHandler):
    """Answers from a script: each entry is "drop", a status, or (status, headers)."""
    script: list = []
    seen: list = []

    def log_message(self, *args):
        pass

    def _answer(self):
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else b""
        type(self).seen.append((self.command, self.path, dict(self.headers), body, time.monotonic()))
        step = type(self).script.pop(0) if type(self).script else 200
        if step == "drop":
            self.close_connection = True
            self.connection.shutdown(2)
            return
        status, hdrs = step if isinstance(step, tuple) else (step, {})
        if status >= 400:
            out = json.dumps({"error": {"code": {409: "conflict", 429: "resource_exhausted", 503: "unavailable",
                                                 404: "not_found"}[status], "message": "scripted",
                                        "details": {"state": "paused"}}}).encode()
        else:
            out = json.dumps({"ok": True}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.send_header("X-Request-Id", "req_test")
        for k, v in hdrs.items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(out)

    do_GET = do_POST = do_PUT = do_DELETE = _answer


class TransportTest(unittest.TestCase):
    def setUp(self):
        Flaky.script, Flaky.seen = [], []
        self.srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Flaky)
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()
        self.addCleanup(self.srv.server_close)
        self.addCleanup(self.srv.shutdown)
        self.t = Transport(f"http://127.0.0.1:{self.srv.server_port}", "k", timeout=10, retries=3)

    def test_post_retried_after_drop_and_503_with_one_idempotency_key(self):
        Flaky.script = ["drop", 503, 200]
        self.assertEqual(self.t.call("POST", "/v1/sandboxes", body={"template": "base"}), {"ok": True})
        self.assertEqual(len(Flaky.seen), 3)
        keys = {s[2].get("Idempotency-Key") for s in Flaky.seen}
        self.assertEqual(len(keys), 1, keys)
        self.assertTrue(keys.pop())
        self.assertEqual({s[3] for s in Flaky.seen}, {b'{"template": "base"}'})

    def test_each_post_has_its_own_key(self):
        self.t.call("POST", "/a", body={})
        self.t.call("POST", "/a", body={})
        self.assertNotEqual(Flaky.seen[0][2]["Idempotency-Key"], Flaky.seen[1][2]["Idempotency-Key"])
        self.t.call("GET", "/a")
        self.assertNotIn("Idempotency-Key", Flaky.seen[2][2])

    def test_429_honours_retry_after(self):
        Flaky.script = [(429, {"Retry-After": "1"}), 200]
        self.t.call("GET", "/v1/sandboxes")
        self.assertEqual(len(Flaky.seen), 2)
        self.assertGreaterEqual(Flaky.seen[1][4] - Flaky.seen[0][4], 0.9)

    def test_429_without_retry_after_raises(self):
        Flaky.script = [429]
        with self.assertRaises(space.ResourceExhausted):
            self.t.call("GET", "/v1/sandboxes")
        self.assertEqual(len(Flaky.seen), 1)

    def test_unavailable_after_retries(self):
        Flaky.script = [503, 503, 503, 503, 503]
        with self.assertRaises(space.Unavailable) as cm:
            self.t.call("POST", "/x", body={})
        self.assertEqual(len(Flaky.seen), 4)
        self.assertEqual(cm.exception.code, "unavailable")

    def test_error_fields(self):
        Flaky.script = [409]
        with self.assertRaises(space.Conflict) as cm:
            self.t.call("POST", "/x", body={})
        e = cm.exception
        self.assertIsInstance(e, space.Error)
        self.assertEqual((e.code, e.message, e.details, e.request_id, e.status),
                         ("conflict", "scripted", {"state": "paused"}, "req_test", 409))

    def test_every_code_has_its_class(self):
        from space.errors import error_for
        for code, cls in [("invalid_argument", space.InvalidArgument), ("unauthenticated", space.Unauthenticated),
                          ("permission_denied", space.PermissionDenied), ("not_found", space.NotFound),
                          ("conflict", space.Conflict), ("failed_precondition", space.FailedPrecondition),
                          ("payload_too_large", space.PayloadTooLarge),
                          ("resource_exhausted", space.ResourceExhausted), ("internal", space.Internal),
                          ("unavailable", space.Unavailable), ("data_loss", space.DataLoss)]:
            e = error_for(code, "m")
            self.assertIs(type(e), cls)
            self.assertEqual(e.code, code)
        self.assertIs(type(error_for("brand_new", "m", status=418)), space.Error)


if __name__ == "__main__":
    unittest.main()
