"""Every reader RPC resolves a session id through the listing index, which refuses another
tenant's session (serving.tenancy): nothing in the reader resolves one past it."""

from __future__ import annotations

import re

from tests.conftest import REPO

#: A call resolving a session id to its file straight from the data root.
_ROOT_LOOKUP = re.compile(r"\broot\.locate\(")


def test_only_the_listing_index_resolves_session_ids() -> None:
    """reader_service never calls DataRoot.locate (a scan of a shard's folder): every place goes
    through ListingIndex.locate, which looks ids up in the listing index's own id index and
    checks the caller's tenant (a new RPC written with root.locate fails here)."""
    found = {
        path.relative_to(REPO).as_posix(): len(_ROOT_LOOKUP.findall(path.read_text(encoding="utf-8")))
        for path in sorted((REPO / "reader_service").glob("*.py"))
    }
    assert {name: count for name, count in found.items() if count} == {}
    source = (REPO / "reader_service" / "listing_index.py").read_text(encoding="utf-8")
    method = source[source.index("    def locate(") :]
    method = method[: method.index("\n    def ", 1)]
    assert "self._known(" in method
    assert "check_visible(" in method  # the tenant check of serving.tenancy


def test_the_name_cache_of_the_reader_is_not_in_shared() -> None:
    """The id index kept current by the reader's folder following lives in reader_service; the
    data root (shared.layout) offers no way to register or forget a name."""
    source = (REPO / "shared" / "layout.py").read_text(encoding="utf-8")
    assert "def register(" not in source
    assert "def forget(" not in source
    assert "rescan" not in source.split("def locate(")[1].split(")")[0]
