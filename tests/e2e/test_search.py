"""Content search end to end (issue 26): a writer and a reader with TLS and the tokens of two
tenants T1 and T2 (real processes), sessions written through the SDK, found through the SDK,
the raw RPC and the ``rollout search`` command."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from rollout.v1 import reader_pb2, reader_pb2_grpc
from rollout_client import (
    InvalidArgumentError,
    RolloutClient,
    SessionHit,
    TurnContext,
    assistant,
    title,
    tool_call,
    tool_result,
    user,
)
from tests.conftest import run_rollout, start_service
from tests.e2e.secured import READER, call, make_certificates, refusal, tls_arguments, write_tokens

T1, T2 = "tok-t1-4f1e", "tok-t2-90ab"


class Pair:
    def __init__(self, folder: Path) -> None:
        data = folder / "data"
        data.mkdir()
        self.certificates = make_certificates(folder)
        tokens = write_tokens(folder / "tokens.json", {T1: "T1", T2: "T2"})
        arguments = tls_arguments(self.certificates, "--auth-tokens", str(tokens))
        self.writer = start_service("writer", data, *arguments)
        self.reader = start_service("reader", data, *arguments)

    def client(self, token: str) -> RolloutClient:
        return RolloutClient(
            self.writer.address.replace("127.0.0.1", "localhost"),
            self.reader.address.replace("127.0.0.1", "localhost"),
            token=token,
            tls_ca=self.certificates.ca_file,
        )

    def stop(self) -> None:
        self.writer.stop()
        self.reader.stop()


@pytest.fixture(scope="module")
def pair(tmp_path_factory) -> Iterator[Pair]:
    started = Pair(tmp_path_factory.mktemp("search"))
    yield started
    started.stop()


def searched(client: RolloutClient, query: str, present: str = "", **filters: str) -> list[SessionHit]:
    """The first page of hits for ``query``; waits (60 s at most) until session ``present`` is
    among them when given (the index follows the files on its own thread)."""
    give_up = time.monotonic() + 60
    while True:
        hits = list(next(client.search(query, **filters)).hits)
        if not present or present in {hit.session_id for hit in hits} or time.monotonic() > give_up:
            return hits
        time.sleep(0.02)


def test_the_acceptance_sessions_are_found_by_tenant_folder_and_branch(pair) -> None:
    with pair.client(T1) as t1, pair.client(T2) as t2:
        s1 = t1.create_session(cwd="/repo/a")
        s1.append(TurnContext({"gitBranch": "main"}), user("run the tests"))
        s1.append(assistant(tool_calls=[tool_call("c1", "shell", '{"cmd": "npm test"}')]))
        (output_seq,) = s1.append(tool_result("c1", "ECONNRESET at db.ts:42")).seqs
        s2 = t1.create_session(cwd="/repo/b")
        s2.append(TurnContext({"gitBranch": "feat-x"}), user("see PR #1234"))
        s3 = t2.create_session(cwd="/repo/a")
        s3.append(user("ECONNRESET here too"))
        assert [hit.session_id for hit in searched(t2, "ECONNRESET", s3.id)] == [s3.id]
        searched(t1, "#1234", s2.id)

        (hit,) = searched(t1, "ECONNRESET", s1.id)
        assert (hit.session_id, hit.cwd, hit.branch, hit.title_match) == (s1.id, "/repo/a", "main", False)
        assert [(match.seq, match.kind, match.snippet) for match in hit.matches] == [
            (output_seq, "tool_output", "«ECONNRESET» at db.ts:42")
        ]
        assert searched(t1, "#1234", cwd="/repo/a") == []
        assert [hit.session_id for hit in searched(t1, "#1234", cwd="/repo/b")] == [s2.id]
        assert [hit.session_id for hit in searched(t1, "#1234", branch="feat-x")] == [s2.id]
        assert searched(t1, "#1234", branch="main") == []
        with pytest.raises(InvalidArgumentError, match="query: holds no word"):
            searched(t1, "#")


def test_search_requests_out_of_range_are_refused_with_the_field_named(pair) -> None:
    channel = grpc.secure_channel(
        pair.reader.address.replace("127.0.0.1", "localhost"),
        grpc.ssl_channel_credentials(pair.certificates.ca_file.read_bytes()),
    )
    search = READER.methods_by_name["SearchSessions"]
    with channel:
        for request, field in (
            (reader_pb2.SearchSessionsRequest(query="x", page_size=101), "page_size"),
            (reader_pb2.SearchSessionsRequest(query="x", page_token="nonsense"), "page_token"),
            (reader_pb2.SearchSessionsRequest(query="x", page_token="s1:\u0663"), "page_token"),  # a digit
            (reader_pb2.SearchSessionsRequest(query="x", since="yesterday"), "since"),
            (reader_pb2.SearchSessionsRequest(query="x" * 1001), "query"),
        ):
            error = refusal(channel, search, request, T1)
            assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert error.details().startswith(f"{field}: ")
        for query in ('NOT (" OR', "NOT\x00(", "\x00x"):
            (page,) = call(channel, search, reader_pb2.SearchSessionsRequest(query=query), T1)
            assert not page.hits  # any text is a literal search: never a syntax error


def test_rollout_search_prints_each_session_with_its_matching_records(pair, tmp_path) -> None:
    with pair.client(T1) as t1:
        session = t1.create_session(cwd=str(tmp_path))
        (seq,) = session.append(user("the flaky upload test again")).seqs
        searched(t1, "flaky upload", session.id)
    reader = pair.reader.address.replace("127.0.0.1", "localhost")
    common = ["--token", T1, "--tls-ca", str(pair.certificates.ca_file)]
    done = run_rollout(
        *common, "search", "flaky upload", "--reader", reader, "--cwd", str(tmp_path), "--within", "1d"
    )
    assert done.returncode == 0, done.stderr
    assert session.id in done.stdout
    assert f"seq {seq} message: the «flaky» «upload» test again" in done.stdout
    elsewhere = run_rollout(
        *common, "search", "flaky upload", "--reader", reader, "--cwd", str(tmp_path / "x")
    )
    assert "no session matches" in elsewhere.stdout
    bad = run_rollout(*common, "search", "flaky", "--reader", reader, "--within", "soon")
    assert bad.returncode != 0
    assert "not a duration" in bad.stderr


def test_the_last_title_wins_in_listings_and_every_title_stays_searchable(pair) -> None:
    """A title, then 5 MB of records, then a second title: the listing (and `rollout ls`) shows
    the second; a search for the first still finds the session, as a title match."""
    with pair.client(T1) as t1:
        session = t1.create_session()
        session.append(title("payments outage triage"))
        filler = "lorem ipsum dolor sit amet " * 4000  # ~100 KB a record
        for _ in range(50):
            session.append(user(filler))
        session.append(title("   "))  # an empty title never replaces one
        session.append(title("Retry budget for the payments client"))
        (summary,) = [
            s
            for page in t1.list_sessions(page_size=1000)
            for s in page.sessions
            if s.session_id == session.id
        ]
        assert summary.title == "Retry budget for the payments client"
        give_up = time.monotonic() + 60  # found once its first title is indexed: wait for the rest
        while True:
            (hit,) = searched(t1, "outage triage", session.id)
            if hit.title != "payments outage triage" or time.monotonic() > give_up:
                break
            time.sleep(0.02)
        assert (hit.session_id, hit.title_match, hit.title) == (
            session.id,
            True,
            "Retry budget for the payments client",
        )
        assert [match.kind for match in hit.matches] == ["title"]
    reader = pair.reader.address.replace("127.0.0.1", "localhost")
    listed = run_rollout("--token", T1, "--tls-ca", str(pair.certificates.ca_file), "ls", "--reader", reader)
    assert listed.returncode == 0, listed.stderr
    (row,) = [line for line in listed.stdout.splitlines() if session.id in line]
    assert "Retry budge" in row  # the title, cut to the terminal's width


def test_ls_lists_a_folders_sessions_with_their_branch_and_all_of_them_with_all(pair, tmp_path) -> None:
    project = tmp_path / "project"
    with pair.client(T1) as t1:
        here = t1.create_session(cwd=str(project / "sub"))
        here.append(TurnContext({"cwd": str(project), "gitBranch": "feat-y"}), user("hello"))
        there = t1.create_session(cwd=str(tmp_path / "projection"))  # not below project
        there.append(user("hello"))
    reader = pair.reader.address.replace("127.0.0.1", "localhost")
    common = ["--token", T1, "--tls-ca", str(pair.certificates.ca_file), "ls", "--reader", reader]
    in_project = run_rollout(*common, "--cwd", str(project))
    assert in_project.returncode == 0, in_project.stderr
    assert f"sessions in {project}" in in_project.stdout
    (row,) = [line for line in in_project.stdout.splitlines() if here.id in line]
    assert "feat-y" in row.split()
    assert there.id not in in_project.stdout
    every = run_rollout(*common, "--all", "--page-size", "1000")
    assert here.id in every.stdout
    assert there.id in every.stdout
    # The current folder (the repository's, where no session ran) has none: every session is listed.
    default = run_rollout(*common, "--page-size", "1000")
    assert there.id in default.stdout
    assert "sessions in" not in default.stdout


def test_a_session_is_named_by_a_unique_id_beginning_or_its_title(pair) -> None:
    """replay, stop-facts and resume take a unique beginning of an id or a title; an ambiguous
    one lists the candidates, an unknown one says what to do."""
    with pair.client(T1) as t1:
        named = t1.create_session()
        named.append(user("the named one"), title("Quarterly report draft"))
        twins = [t1.create_session(), t1.create_session()]
        for twin in twins:
            twin.append(user("twin"), title("Twin title"))
        named.stop("paused", "later")
    reader = pair.reader.address.replace("127.0.0.1", "localhost")
    writer = pair.writer.address.replace("127.0.0.1", "localhost")
    common = ["--token", T1, "--tls-ca", str(pair.certificates.ca_file)]
    by_title = run_rollout(*common, "stop-facts", "quarterly REPORT draft", "--reader", reader)
    assert by_title.returncode == 0, by_title.stderr
    assert named.id in by_title.stdout
    by_prefix = run_rollout(*common, "replay", named.id[:-4], "--reader", reader)
    assert by_prefix.returncode == 0, by_prefix.stderr
    assert "the named one" in by_prefix.stdout
    resumed = run_rollout(*common, "resume", "Quarterly report draft", "--writer", writer, "--reader", reader)
    assert resumed.returncode == 0, resumed.stderr
    assert f"{named.id}: resumed (was paused)" in resumed.stdout
    ambiguous = run_rollout(*common, "stop-facts", "twin title", "--reader", reader)
    assert ambiguous.returncode == 1
    assert "names 2 sessions" in ambiguous.stderr
    assert all(twin.id in ambiguous.stderr for twin in twins)
    unknown = run_rollout(*common, "replay", "no such title anywhere", "--reader", reader)
    assert unknown.returncode == 1
    assert "rollout ls --all" in unknown.stderr


def test_a_reader_without_an_index_answers_unavailable_and_an_index_folder_serves_one_reader(
    data_dir, tmp_path
) -> None:
    off = start_service("reader", data_dir, "--no-search")
    try:
        with grpc.insecure_channel(off.address) as channel, pytest.raises(grpc.RpcError) as refused:
            reader_pb2_grpc.RolloutReaderStub(channel).SearchSessions(
                reader_pb2.SearchSessionsRequest(query="x"), timeout=20
            )
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
        assert "--no-search" in refused.value.details()
    finally:
        off.stop()
    folder = tmp_path / "index"
    first = start_service("reader", data_dir, "--search-index-dir", str(folder))
    try:
        with pytest.raises(
            RuntimeError, match="--search-index-dir: another reader uses this search index folder"
        ):
            start_service("reader", data_dir, "--search-index-dir", str(folder))
    finally:
        first.stop()


def test_titles_and_text_from_the_files_never_drive_the_terminal_nor_break_a_command(pair, tmp_path) -> None:
    """A title, a first prompt, a branch and a snippet are text written by agents or importers: the
    commands show their control characters escaped (an ESC sequence would recolour, retitle or clear
    the terminal) and square brackets as they are (never read as markup: '[/]' made `ls` fail)."""
    hostile = "[/] [b]x[/b] \x1b[31mred\x1b]0;pwned\x07"
    with pair.client(T1) as t1:
        twins = [t1.create_session(cwd=str(tmp_path)) for _ in range(2)]
        for twin in twins:
            twin.append(TurnContext({"gitBranch": "b\x1b[2J"}), user(f"zqhostile {hostile}"), title(hostile))
        searched(t1, "zqhostile", twins[1].id)
    reader = pair.reader.address.replace("127.0.0.1", "localhost")
    common = ["--token", T1, "--tls-ca", str(pair.certificates.ca_file)]
    outputs = []
    for command in (["ls", "--cwd", str(tmp_path)], ["search", "zqhostile"], ["replay", hostile]):
        done = run_rollout(*common, *command, "--reader", reader)
        assert "Traceback" not in done.stderr, done.stderr
        outputs.append(done.stdout + done.stderr)
    for shown in outputs:
        assert "\x1b" not in shown
        assert "\x07" not in shown
        assert "\\x1b" in shown
    assert all(twin.id in outputs[0] and twin.id in outputs[2] for twin in twins)
    assert "[/] [b]x" in outputs[0]
    assert "[/] [b]x[/b] \\x1b[31mred\\x1b]0;pwned\\x07" in outputs[2]


def test_a_query_may_begin_with_a_dash_and_any_duration_is_taken(pair) -> None:
    """`rollout search -- -x` is click's way; a query such as '-fno-strict' works without it. A
    duration longer than the calendar keeps every session, never a traceback."""
    with pair.client(T1) as t1:
        session = t1.create_session()
        session.append(user("build with -fzqdash flag"))
        searched(t1, "fzqdash", session.id)
    reader = pair.reader.address.replace("127.0.0.1", "localhost")
    common = ["--token", T1, "--tls-ca", str(pair.certificates.ca_file), "search", "--reader", reader]
    dashed = run_rollout(*common, "-fzqdash")
    assert dashed.returncode == 0, dashed.stderr
    assert session.id in dashed.stdout
    long_ago = run_rollout(*common, "fzqdash", "--within", "99999999d")
    assert long_ago.returncode == 0, long_ago.stderr
    assert session.id in long_ago.stdout
