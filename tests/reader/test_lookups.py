"""Every reader RPC resolves a session id through the listing index, which refuses another
tenant's session (serving.tenancy): nothing in the reader resolves one past it."""

from __future__ import annotations

import re

from tests.conftest import REPO

#: A call resolving a session id to its file straight from the data root.
_ROOT_LOOKUP = re.compile(r"\broot\.locate\(")


def test_only_the_listing_index_resolves_session_ids_from_the_data_root() -> None:
    """reader_service calls DataRoot.locate in ListingIndex.locate alone; every other place goes
    through ListingIndex.locate (a new RPC written with root.locate fails here)."""
    found = {
        path.relative_to(REPO).as_posix(): len(_ROOT_LOOKUP.findall(path.read_text(encoding="utf-8")))
        for path in sorted((REPO / "reader_service").glob("*.py"))
    }
    assert {name: count for name, count in found.items() if count} == {"reader_service/listing_index.py": 1}
    source = (REPO / "reader_service" / "listing_index.py").read_text(encoding="utf-8")
    method = source[source.index("    def locate(") :]
    method = method[: method.index("\n    def ", 1)]
    assert "root.locate(" in method
    assert "check_visible(" in method  # the tenant check of serving.tenancy
