"""The harness itself: a server starts on the demo data, lists its datasets and stops."""
import json
import unittest

from harness import Server


class TestHarness(unittest.TestCase):
    def test_server_lists_demo_datasets(self):
        with Server() as s:
            status, headers, body = s.get("/api/v1/datasets")
            self.assertEqual(status, 200)
            names = {d["name"] for d in json.loads(body)}
            self.assertTrue({"horsehead", "m13", "l1448_13co"} <= names, names)
            pid = s.proc.pid
        self.assertIsNotNone(s.proc.returncode, f"tesserad {pid} still running")


if __name__ == "__main__":
    unittest.main()
