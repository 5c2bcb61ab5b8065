"""A FlashInfer module the route loaded before is recalled in a fresh process (no loader, no
FlashInfer flag builders), and not once a header it read changed (bytes, mtime restored)."""
from __future__ import annotations

import json
import os

from .conftest import PROBE, FiEnv

RECALL_PROBE = PROBE + """
print(json.dumps({"recalled": "kernelcache.lookup.loader" not in sys.modules, "library": str(spec.get_library_path())}))
"""


def _probe(fi: FiEnv) -> dict:
    before = fi.links()
    out = json.loads(fi.run(fi.tmp / "ws-a", code=RECALL_PROBE).stdout.splitlines()[-1])
    out["links"] = fi.links() - before
    return out


def test_a_routed_module_is_recalled_until_a_header_it_read_changes(fi: FiEnv) -> None:
    first = _probe(fi)
    first = _probe(fi) if not first["recalled"] else first  # another test may have just moved a witness
    assert (first["recalled"], first["links"]) == (True, 0)
    assert first["library"].startswith(str(fi.cache))  # the paths FlashInfer asks name the entry
    old = fi.probe_h.read_bytes()
    st = fi.probe_h.stat()
    try:
        fi.probe_h.write_bytes(old.replace(b"1", b"3"))
        os.utime(fi.probe_h, ns=(st.st_atime_ns, st.st_mtime_ns))
        changed = _probe(fi)
        assert (changed["recalled"], changed["links"]) == (False, 1)
        assert changed["library"] != first["library"]
        again = _probe(fi)
        assert (again["recalled"], again["links"], again["library"]) == (True, 0, changed["library"])
    finally:
        fi.probe_h.write_bytes(old)
        os.utime(fi.probe_h, ns=(st.st_atime_ns, st.st_mtime_ns))
