"""The content index (issue 26, docs/spec.md §10): derived from the files, current as they grow, scoped."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

import reader_service.search_index as search_index
from reader_service.search_index import (
    INDEX_FILE,
    SearchFilters,
    SearchIndex,
    branch_of,
    fts_terms,
    record_texts,
)
from shared.errors import InvalidArgumentError
from shared.layout import DataRoot
from tests.reader.test_listing_index import append, user, write

T1 = SearchFilters(tenant="T1")


def tool_call(call_id: str, name: str, arguments: str) -> tuple[str, dict]:
    return (
        "message",
        {
            "role": "assistant",
            "tool_calls": [
                {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
            ],
        },
    )


def tool_output(call_id: str, text: str) -> tuple[str, dict]:
    return ("message", {"role": "tool", "tool_call_id": call_id, "content": text})


def three_sessions(data_dir: Path) -> list[Path]:
    """S1 (T1, /repo/a, main) with a tool output, S2 (T1, /repo/b, feat-x) with a user text, S3 (T2)."""
    return [
        write(
            data_dir,
            1,
            "T1",
            ("turn_context", {"gitBranch": "main"}),
            tool_call("c1", "shell", '{"cmd": "npm test"}'),
            tool_output("c1", "ECONNRESET at db.ts:42"),
            cwd="/repo/a",
        ),
        write(
            data_dir, 2, "T1", ("turn_context", {"gitBranch": "feat-x"}), user("see PR #1234"), cwd="/repo/b"
        ),
        write(data_dir, 3, "T2", user("ECONNRESET again"), cwd="/repo/a"),
    ]


def found(index: SearchIndex, query: str, filters: SearchFilters = T1) -> list[str]:
    return [hit.session_id[-1:] for hit in index.search(query, filters, 20, 0).hits]


@pytest.fixture
def index(data_dir: Path, tmp_path: Path):
    made = SearchIndex(DataRoot(data_dir), tmp_path / "search")
    yield made
    made.close()


def test_a_word_finds_the_sessions_of_the_tenant_that_hold_it_with_the_record_and_a_snippet(
    data_dir, index
) -> None:
    three_sessions(data_dir)
    index.catch_up()
    (hit,) = index.search("ECONNRESET", T1, 20, 0).hits
    assert hit.session_id.endswith("1")
    assert (hit.cwd, hit.branch, hit.tenant) == ("/repo/a", "main", "T1")
    ((seq, kind, snippet),) = [(m.seq, m.kind, m.snippet) for m in hit.matches]
    assert (seq, kind, snippet) == (3, "tool_output", "«ECONNRESET» at db.ts:42")
    assert not hit.title_match
    assert found(index, "ECONNRESET", SearchFilters()) == ["3", "1"]  # no tenant: every tenant's
    assert found(index, "npm", T1) == ["1"]  # a tool call's arguments
    assert found(index, "shell", T1) == ["1"]  # and its name


def test_cwd_and_branch_narrow_a_search(data_dir, index) -> None:
    three_sessions(data_dir)
    index.catch_up()
    assert found(index, "#1234", SearchFilters(tenant="T1", cwd="/repo/a")) == []
    assert found(index, "#1234", SearchFilters(tenant="T1", cwd="/repo/b")) == ["2"]
    assert found(index, "#1234", SearchFilters(tenant="T1", cwd="/repo")) == ["2"]  # a folder above
    assert found(index, "#1234", SearchFilters(tenant="T1", cwd="/rep")) == []  # not a folder above
    assert found(index, "#1234", SearchFilters(tenant="T1", branch="feat-x")) == ["2"]
    assert found(index, "#1234", SearchFilters(tenant="T1", branch="main")) == []
    assert found(index, "#1234", SearchFilters(tenant="T1", since="2026-03-02T00:00:00.000000Z")) == []


def test_a_growing_file_is_indexed_from_where_it_was_left_and_a_replaced_or_cut_one_again(
    data_dir, index
) -> None:
    s1, s2, _ = three_sessions(data_dir)
    index.catch_up()
    append(s2, 3, "reasoning", {"content": "maybe the pool leaks sockets"})
    index.catch_up()
    assert found(index, "sockets") == ["2"]
    assert found(index, "#1234") == ["2"]  # what was indexed before stays
    # Cut below what was indexed: read again from its start (the record cut away is gone).
    data = s2.read_bytes()
    with s2.open("r+b") as handle:
        handle.truncate(data.rindex(b"\n", 0, len(data) - 1) + 1)
    index.catch_up()
    assert found(index, "sockets") == []
    assert found(index, "#1234") == ["2"]
    # Replaced by another file (a new inode) of the same size: read again.
    replacement = s1.with_name(s1.name + ".tmp")
    replacement.write_bytes(s1.read_bytes().replace(b"ECONNRESET", b"EPIPEXXXXX"))
    os.replace(replacement, s1)
    index.catch_up()
    assert found(index, "ECONNRESET") == []
    assert found(index, "EPIPEXXXXX") == ["1"]
    s1.unlink()
    index.catch_up()
    assert found(index, "EPIPEXXXXX") == []


def test_the_index_thread_follows_new_sessions_and_growth(data_dir, tmp_path) -> None:
    s1, _, _ = three_sessions(data_dir)
    index = SearchIndex(DataRoot(data_dir), tmp_path / "search")
    index.start()
    try:
        assert index.wait_indexed(s1.name, s1.stat().st_size, 60)
        append(s1, 4, "message", {"role": "assistant", "content": "retry with backoff"})
        assert index.wait_indexed(s1.name, s1.stat().st_size, 60)
        assert found(index, "backoff") == ["1"]
        s4 = write(data_dir, 4, "T1", user("a brand new session"))
        assert index.wait_indexed(s4.name, s4.stat().st_size, 60)
        assert found(index, "brand") == ["4"]
    finally:
        index.close()


def test_an_index_left_by_an_earlier_run_is_used_and_a_broken_one_rebuilt(data_dir, tmp_path) -> None:
    s1, _, _ = three_sessions(data_dir)
    folder = tmp_path / "search"
    first = SearchIndex(DataRoot(data_dir), folder)
    first.catch_up()
    with pytest.raises(OSError, match="another reader"):
        SearchIndex(DataRoot(data_dir), folder)
    first.close()
    append(s1, 4, "message", {"role": "assistant", "content": "retry with backoff"})
    again = SearchIndex(DataRoot(data_dir), folder)
    again.catch_up()
    assert found(again, "backoff") == found(again, "ECONNRESET") == ["1"]
    again.close()
    (folder / INDEX_FILE).write_bytes(b"not a database at all" * 100)
    for name in ("search-v0.sqlite3", "search-v0.sqlite3-wal"):  # an earlier version's: removed
        (folder / name).write_bytes(b"old")
    rebuilt = SearchIndex(DataRoot(data_dir), folder)
    assert sorted(path.name for path in folder.glob("search-v0*")) == []
    rebuilt.catch_up()
    assert found(rebuilt, "ECONNRESET") == ["1"]
    rebuilt.close()
    temporary = SearchIndex(DataRoot(data_dir))
    assert temporary.folder.exists()
    temporary.close()
    assert not temporary.folder.exists()


def test_any_text_is_a_literal_search_and_a_query_without_words_is_refused() -> None:
    assert fts_terms('ECONNRESET "db.ts:42" NOT econn* ("') == [
        '"ECONNRESET"',
        '"db.ts:42"',
        '"NOT"',
        '"econn"*',
    ]
    assert fts_terms('say "a ""b"" c"') == ['"say"', '"a "', '"b"', '" c"']
    for query in ("", "  ", "# ! *", "x" * 1001):
        with pytest.raises(InvalidArgumentError, match=r"^query: "):
            fts_terms(query)


def test_what_a_record_contributes() -> None:
    assert record_texts("message", {"role": "user", "content": [{"type": "text", "text": "hi"}]}) == [
        ("message", "hi")
    ]
    assert record_texts("reasoning", {"content": "", "encrypted": "zzz"}) == []
    assert record_texts("event", {"kind": "title", "body": {"title": "Fix CI"}}) == [("title", "Fix CI")]
    assert record_texts("event", {"kind": "token_count", "body": {"title": "x"}}) == []
    assert branch_of("turn_context", {"git_branch": "b1"}) == "b1"
    assert branch_of("event", {"kind": "codex.session_meta", "body": {"git": {"branch": "b2"}}}) == "b2"
    assert branch_of("message", {"gitBranch": "b3"}) is None


def test_a_word_in_more_records_than_are_ranked_ranks_the_newest_and_says_so(
    data_dir, index, monkeypatch
) -> None:
    for number in range(1, 5):
        write(data_dir, number, "T1", user("the same words"), user("the same words"))
    index.catch_up()
    page = index.search("same", T1, 20, 0)
    assert (len(page.hits), page.capped) == (4, False)
    monkeypatch.setattr(search_index, "MAX_RANKED_RECORDS", 3)
    page = index.search("same", T1, 20, 0)
    assert page.capped
    assert sorted(hit.session_id[-1:] for hit in page.hits) == ["3", "4"]  # the last 3 records' sessions


def test_the_listing_and_the_content_index_agree_on_the_title(data_dir, index) -> None:
    """Both fold title records through shared.titles.next_title: an empty title never replaces one."""
    from reader_service.listing_index import ListingIndex

    titled = write(
        data_dir,
        1,
        "T1",
        ("event", {"kind": "title", "body": {"title": "First  name"}}),
        user("work"),
        ("event", {"kind": "title", "body": {"title": "Second name"}}),
        ("event", {"kind": "title", "body": {"title": " "}}),
        ("event", {"kind": "token_count", "body": {"title": "not a title"}}),
    )
    index.catch_up()
    (hit,) = index.search("first", T1, 20, 0).hits
    assert (hit.title, hit.title_match) == ("Second name", True)
    assert ListingIndex(DataRoot(data_dir)).activity(titled.name).title == "Second name"


class _FailingUpdate:
    """The index's connection, failing the ``fail_at``-th update of a sessions row (then as it is)."""

    def __init__(self, connection, fail_at: int) -> None:
        self.connection = connection
        self.updates = 0
        self.fail_at = fail_at

    def execute(self, sql: str, *arguments):
        if sql.startswith("UPDATE sessions"):
            self.updates += 1
            if self.updates == self.fail_at:
                raise search_index.sqlite3.OperationalError("disk I/O error (injected)")
        return self.connection.execute(sql, *arguments)

    def __getattr__(self, name: str):
        return getattr(self.connection, name)


def test_a_step_whose_transaction_fails_is_done_again_whole(data_dir, index) -> None:
    """The indexing thread keeps each file's row in memory; when a transaction fails (the rows
    it wrote are rolled back), a file indexed earlier in it is read again from where the index
    file says, not from where the memory said: nothing appended before the failure is lost."""
    s1, s2, _ = three_sessions(data_dir)
    index.catch_up()
    append(s1, 4, "reasoning", {"content": "the pool leaks sockets"})
    append(s2, 3, "reasoning", {"content": "flaky upload fixture"})
    real = index._connection
    index._connection = _FailingUpdate(real, fail_at=2)  # s1's update passes, s2's fails: both undone
    with pytest.raises(search_index.sqlite3.OperationalError):
        index.catch_up()
    index._connection = real
    index.catch_up()
    assert found(index, "sockets") == ["1"]
    assert found(index, "flaky") == ["2"]


def test_the_wait_between_steps_grows_with_a_long_step_and_is_bounded(monkeypatch) -> None:
    """After a quick step the next waits BATCH_SECONDS (from the round's start); after a long one
    (much to index, or a CPU too busy to serve the indexing thread) BATCH_FACTOR times it, never
    more than MAX_BATCH_SECONDS: the index's lag stays bounded."""
    monkeypatch.setattr(search_index.time, "monotonic", lambda: 100.0)
    wait = SearchIndex._batch_wait
    assert wait(100.0, 0.01) == search_index.BATCH_SECONDS
    assert wait(99.9, 0.01) == pytest.approx(search_index.BATCH_SECONDS - 0.1)
    assert wait(100.0, 0.1) == pytest.approx(search_index.BATCH_FACTOR * 0.1)
    assert wait(100.0, 5.0) == search_index.MAX_BATCH_SECONDS
    assert wait(90.0, 5.0) == 0.0


def test_a_nul_in_a_query_is_a_word_break_not_an_unreadable_index(data_dir, index) -> None:
    """SQLite reads an FTS5 expression up to its first NUL: a query holding one (a raw gRPC
    string may) searches its words, never failing as if the index could not be read."""
    three_sessions(data_dir)
    index.catch_up()
    assert "\x00" not in " ".join(fts_terms("db\x00ts"))
    assert found(index, "ECONNRESET\x00db") == ["1"]
    with pytest.raises(InvalidArgumentError, match=r"^query: holds no word"):
        fts_terms("\x00")


def test_another_tenants_records_neither_hide_a_tenants_matches_nor_show_in_its_cap(
    data_dir, index, monkeypatch
) -> None:
    """The records ranked for one query are bounded (MAX_RANKED_RECORDS), the newest first: the
    bound counts the caller's tenant's records only, so tenant T2's many newer records with the
    word neither push T1's older session out of T1's results nor tell T1 (``capped``) they exist."""
    write(data_dir, 1, "T1", user("the pool leaks sockets"))
    for number in range(2, 6):
        write(data_dir, number, "T2", user("sockets again"), user("sockets again"))
    index.catch_up()
    monkeypatch.setattr(search_index, "MAX_RANKED_RECORDS", 3)
    page = index.search("sockets", T1, 20, 0)
    assert ([hit.session_id[-1:] for hit in page.hits], page.capped) == (["1"], False)
    page = index.search("sockets", SearchFilters(tenant="T1", cwd="/elsewhere"), 20, 0)
    assert (page.hits, page.capped) == ([], False)


def test_words_at_the_start_of_a_line_in_json_arguments_and_outputs_are_found(data_dir, index) -> None:
    """Tool call arguments are JSON text, and many tool outputs too (Codex: {"output": "..."}):
    a newline in them is the two characters backslash and n, which the tokenizer would glue to the
    next word ("nexport"). Their strings are indexed as decoded text."""
    write(
        data_dir,
        1,
        "T1",
        tool_call("c1", "write_file", '{"path": "a.ts", "content": "import x;\\nexport const y = 1;"}'),
        tool_output(
            "c1", '{"output": "line one\\nlisted \\u00e9t\\u00e9 done", "metadata": {"exit_code": 0}}'
        ),
        user('a user says {"not": "json\\nparsed"} as text'),
    )
    index.catch_up()
    assert found(index, "export") == ["1"]
    assert found(index, "listed") == ["1"]
    assert found(index, "été") == ["1"]
    assert found(index, "exit_code") == ["1"]  # keys stay searchable
    assert found(index, "nexport") == []


def test_a_file_rewritten_in_place_and_grown_past_what_was_indexed_is_read_again(data_dir, index) -> None:
    """A file cut and written again (same inode) to more than was indexed before the index looked:
    its old words leave the index and its new ones, before the old offset too, are found."""
    _, s2, _ = three_sessions(data_dir)
    index.catch_up()
    assert found(index, "#1234") == ["2"]
    data = s2.read_bytes().replace(b"see PR #1234", b"see PR #9876")
    with s2.open("r+b") as handle:
        handle.write(data)
    append(s2, 3, "reasoning", {"content": "and it grew"})
    index.catch_up()
    assert found(index, "#1234") == []
    assert found(index, "#9876") == ["2"]


def test_the_words_of_a_query_may_stand_in_different_records_of_a_session(data_dir, index) -> None:
    """Every word must appear in the session (SearchSessions in reader.proto), not all in one
    record: a person remembers an error from an output and a word they typed. Records holding
    more of the words come first, each word is highlighted, and a record counts once."""
    write(
        data_dir,
        1,
        "T1",
        user("the upload fixture is flaky"),
        tool_output("c1", "ECONNRESET at db.ts:42"),
        user("upload again after ECONNRESET"),
    )
    write(data_dir, 2, "T1", user("only the upload here"))
    write(data_dir, 3, "T2", user("upload"), user("ECONNRESET"))
    index.catch_up()
    (hit,) = index.search("upload ECONNRESET", T1, 20, 0).hits
    assert hit.session_id.endswith("1")
    assert hit.match_count == 3
    assert (hit.matches[0].seq, hit.matches[0].snippet) == (3, "«upload» again after «ECONNRESET»")
    assert found(index, '"fixture is flaky" db.ts') == ["1"]
    assert found(index, "upload ECONNRESET nowhere") == []
    assert found(index, "upload ECONNRESET", SearchFilters()) == ["3", "1"]


def test_a_title_holding_any_word_of_a_query_labels_the_hit_a_title_match(data_dir, index) -> None:
    """A title match is labelled apart from a content match (SearchSessions) whichever word of
    the query the title holds: here the commoner one, looked for after the rarest."""
    write(
        data_dir,
        1,
        "T1",
        ("event", {"kind": "title", "body": {"title": "Deploy checklist"}}),
        user("ECONNRESET on deploy"),
    )
    write(data_dir, 2, "T1", user("ECONNRESET while reading the checklist"))
    write(data_dir, 3, "T1", user("checklist"), user("the checklist again"), user("checklist done"))
    index.catch_up()
    hits = {hit.session_id[-1:]: hit for hit in index.search("ECONNRESET checklist", T1, 20, 0).hits}
    assert sorted(hits) == ["1", "2"]
    assert hits["1"].title_match
    assert not hits["2"].title_match


def test_temporary_index_folders_left_by_readers_that_died_are_removed(
    data_dir, tmp_path, monkeypatch
) -> None:
    """A reader killed (kill -9, a crash) never removes its temporary index folder: the next
    reader to make one removes those no reader holds (their lock is free) and that are older
    than a minute (one being made has no lock yet)."""
    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setattr(search_index.tempfile, "tempdir", str(temp))
    held = SearchIndex(DataRoot(data_dir))
    dead, young, other = temp / "rollout-search-dead", temp / "rollout-search-young", temp / "other"
    for folder in (dead, young, other):
        folder.mkdir()
        (folder / "lock").touch()
        (folder / INDEX_FILE).write_bytes(b"x" * 1000)
    old = time.time() - 3600
    for folder in (dead, other, held.folder):
        os.utime(folder, (old, old))
    made = SearchIndex(DataRoot(data_dir))
    try:
        assert sorted(path.name for path in temp.iterdir()) == sorted(
            [held.folder.name, made.folder.name, young.name, other.name]
        )
    finally:
        made.close()
        held.close()


def _found_from_a_new_thread(index: SearchIndex, query: str) -> list[str] | str:
    """``found`` on a thread of its own (its first connection to the index), or the error."""
    answer: list[list[str] | str] = []

    def run() -> None:
        try:
            answer.append(found(index, query))
        except search_index.sqlite3.Error as exc:
            answer.append(f"error: {exc}")

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    return answer[0]


@pytest.mark.parametrize("damage", ["deleted", "overwritten"])
def test_an_index_file_deleted_or_damaged_under_a_running_reader_is_built_again(
    data_dir, tmp_path, damage
) -> None:
    """The index file removed (a /tmp cleaner) or overwritten while the reader runs: the indexing
    thread builds it again from the files, and searches (on any thread) read the new one, instead
    of failing or reading a file gone until the reader restarts."""
    s1, _, _ = three_sessions(data_dir)
    index = SearchIndex(DataRoot(data_dir), tmp_path / "search", sweep_seconds=0.2)
    index.start()
    try:
        assert index.wait_indexed(s1.name, s1.stat().st_size, 60)
        assert found(index, "ECONNRESET") == ["1"]
        for suffix in ("", "-wal", "-shm"):
            target = Path(f"{index.path}{suffix}")
            if damage == "deleted":
                target.unlink(missing_ok=True)
            elif target.exists():
                target.write_bytes(b"\xff" * target.stat().st_size)
        s4 = write(data_dir, 4, "T1", user("written after the damage"))
        give_up = time.monotonic() + 60
        while _found_from_a_new_thread(index, "damage") != ["4"] and time.monotonic() < give_up:
            time.sleep(0.05)
        assert _found_from_a_new_thread(index, "damage") == ["4"]
        assert _found_from_a_new_thread(index, "ECONNRESET") == ["1"]
        assert found(index, "ECONNRESET") == ["1"]  # a thread that read the old file too
        assert s4.exists()
    finally:
        index.close()
