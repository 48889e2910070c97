"""The sessions folder as the reader knows it (reader_service.session_folder): current at every
call from inotify's reports, never resting on them (SPEC §5, §7)."""

from __future__ import annotations

import errno
import os
import random
import shutil
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from inotify_simple import Event, INotify, flags

import reader_service.session_folder as session_folder
from reader_service.listing import SessionFilters, list_sessions
from reader_service.listing_index import ListingIndex
from shared.errors import SessionNotFoundError
from shared.layout import DataRoot
from shared.naming import build_file_name
from shared.records import encode_line, format_timestamp

BASE = datetime(2026, 5, 1, tzinfo=UTC)


def session_id(number: int) -> str:
    return f"01900000-0000-7000-8000-{number:012x}"


def path_of(data_dir: Path, number: int) -> Path:
    return data_dir / "sessions" / build_file_name(BASE + timedelta(seconds=number), session_id(number))


def write(data_dir: Path, number: int, tenant: str = "t") -> Path:
    """A session file as the writer publishes one: written under a temporary name, then linked
    to its own (one second after the previous number)."""
    folder = data_dir / "sessions"
    folder.mkdir(exist_ok=True)
    created = BASE + timedelta(seconds=number)
    meta = {"session_id": session_id(number), "tenant": tenant, "created_at": format_timestamp(created)}
    path = folder / build_file_name(created, session_id(number))
    temporary = folder / f".{path.name}.tmp-{os.urandom(4).hex()}"
    temporary.write_bytes(encode_line(0, format_timestamp(created), "session_meta", meta))
    os.link(temporary, path)
    temporary.unlink()
    return path


def age_folder(data_dir: Path) -> None:
    """Give the sessions folder an old time stamp (any later change then moves it)."""
    old = time.time_ns() - 3600 * 10**9
    os.utime(data_dir / "sessions", ns=(old, old))


def listed(index: ListingIndex, tenant: str = "") -> list[str]:
    page = list_sessions(index, page_size=1000, filters=SessionFilters(tenant=tenant))
    return [listing.name.session_id for listing in page.sessions]


def listings_in_calls(index: ListingIndex) -> int:
    return index.folder.listings["call"]


@pytest.fixture
def unreported(monkeypatch):
    """inotify reports nothing (as for a change made through another host)."""
    monkeypatch.setattr(INotify, "read", lambda self, timeout=None, read_delay=None: [])


def refuse_inotify(*_args: object, **_kwargs: object) -> INotify:
    """What INotify() raises when the process has no inotify instance left."""
    raise OSError(errno.EMFILE, "Too many open files")


def test_a_session_created_or_removed_on_this_host_is_known_from_the_report_alone(data_dir) -> None:
    """After the first listing, new, moved-in and removed session files reach the next call from
    inotify's reports: listed, found by id and by tenant, with no listing of the folder."""
    for number in range(3):
        write(data_dir, number)
    index = ListingIndex(DataRoot(data_dir))
    assert listed(index) == [session_id(n) for n in (2, 1, 0)]
    assert listings_in_calls(index) == 1
    write(data_dir, 10, tenant="u")
    moved = write(data_dir, 11)
    os.rename(moved, moved.with_name(moved.name.replace(".jsonl", "_mover.jsonl")))
    path_of(data_dir, 1).unlink()
    assert listed(index) == [session_id(n) for n in (11, 10, 2, 0)]
    assert listed(index, tenant="u") == [session_id(10)]
    assert index.locate(session_id(10))[1] == path_of(data_dir, 10)
    assert listings_in_calls(index) == 1, "the folder is not listed again"
    index.close()


def test_an_unknown_id_in_an_unchanged_folder_is_not_found_without_listing_it(data_dir) -> None:
    """A lookup of an id no file holds is NOT_FOUND; the folder is listed for it only when its
    time stamp moved since the last listing."""
    write(data_dir, 1)
    age_folder(data_dir)
    index = ListingIndex(DataRoot(data_dir))
    index.sync()
    for _ in range(3):
        with pytest.raises(SessionNotFoundError):
            index.locate(session_id(99))
    assert listings_in_calls(index) == 1
    index.close()


def test_a_change_nothing_reported_is_found_by_listing_the_folder(data_dir, unreported) -> None:
    """When the folder's time stamp moved and no report came (another host's change), the call
    lists the folder: the new session is listed and found, a removed one is gone."""
    old = write(data_dir, 1)
    age_folder(data_dir)
    index = ListingIndex(DataRoot(data_dir))
    assert listed(index) == [session_id(1)]
    write(data_dir, 2)
    old.unlink()
    assert listed(index) == [session_id(2)]
    assert listings_in_calls(index) == 2
    age_folder(data_dir)
    write(data_dir, 3)
    assert index.locate(session_id(3))[1].exists()
    index.close()


def test_lost_reports_make_the_next_call_list_the_folder(data_dir, monkeypatch) -> None:
    """When the kernel's queue overflowed (reports dropped), the next call lists the folder, even
    with its time stamp unchanged."""
    write(data_dir, 1)
    age_folder(data_dir)
    stamp = (data_dir / "sessions").stat().st_mtime_ns
    index = ListingIndex(DataRoot(data_dir))
    assert listed(index) == [session_id(1)]
    overflow = Event(wd=-1, mask=flags.Q_OVERFLOW, cookie=0, name="")
    with monkeypatch.context() as lossy:
        lossy.setattr(INotify, "read", lambda self, timeout=None, read_delay=None: [overflow])
        write(data_dir, 2)
        os.utime(data_dir / "sessions", ns=(stamp, stamp))
        assert listed(index) == [session_id(2), session_id(1)]
    assert listings_in_calls(index) == 2
    index.close()


def test_a_lookup_that_misses_lists_a_folder_changed_since_its_last_listing(data_dir, monkeypatch) -> None:
    """A session whose creation was not reported, while reported changes defer the folder's next
    listing, is found by a lookup: the miss lists the folder."""
    monkeypatch.setattr(ListingIndex, "_verify_later", lambda self: None)  # no background listing
    write(data_dir, 1)
    index = ListingIndex(DataRoot(data_dir))
    assert listed(index) == [session_id(1)]
    hidden = path_of(data_dir, 3).name
    real_read = INotify.read
    monkeypatch.setattr(
        INotify,
        "read",
        lambda self, timeout=None, read_delay=None: [
            event for event in real_read(self, timeout=timeout) if hidden not in event.name
        ],
    )
    write(data_dir, 2)
    write(data_dir, 3)
    calls = listings_in_calls(index)
    assert index.locate(session_id(3))[1].name == hidden
    assert listings_in_calls(index) == calls + 1
    assert listed(index) == [session_id(n) for n in (3, 2, 1)]
    index.close()


def test_a_folder_removed_and_made_again_is_listed_and_followed_again(data_dir) -> None:
    """Sessions of a sessions folder removed are gone; the folder made again is listed, then
    followed again (its new sessions come from reports)."""
    write(data_dir, 1)
    index = ListingIndex(DataRoot(data_dir))
    assert listed(index) == [session_id(1)]
    shutil.rmtree(data_dir / "sessions")
    assert listed(index) == []
    write(data_dir, 2)
    assert listed(index) == [session_id(2)]
    assert index.folder.followed
    calls = listings_in_calls(index)
    write(data_dir, 3)
    assert listed(index) == [session_id(3), session_id(2)]
    assert listings_in_calls(index) == calls
    index.close()


def test_a_name_reported_while_the_folder_is_listed_keeps_what_the_report_said(data_dir, monkeypatch) -> None:
    """A listing read before a change does not undo it: a file made again after the folder was read
    stays, one removed after it was read is not brought back."""
    write(data_dir, 1)
    write(data_dir, 2)
    index = ListingIndex(DataRoot(data_dir))
    assert listed(index) == [session_id(2), session_id(1)]
    real_listdir = os.listdir
    real_read = INotify.read
    overflow = [Event(wd=-1, mask=flags.Q_OVERFLOW, cookie=0, name="")]  # makes the next call list

    def listdir_around_changes(path: Path) -> list[str]:
        path_of(data_dir, 2).unlink()
        write(data_dir, 3)
        names = real_listdir(path)  # 1 and 3, not 2
        write(data_dir, 2)
        path_of(data_dir, 3).unlink()
        return names

    monkeypatch.setattr(session_folder.os, "listdir", listdir_around_changes)
    monkeypatch.setattr(
        INotify,
        "read",
        lambda self, timeout=None, read_delay=None: [
            *real_read(self, timeout=timeout),
            *(overflow.pop() for _ in range(len(overflow))),
        ],
    )
    index.sync()
    monkeypatch.undo()
    assert listings_in_calls(index) == 2
    assert len(index.folder) == 2
    assert listed(index) == [session_id(2), session_id(1)]
    index.close()


def test_without_inotify_the_folder_is_listed_whenever_it_changed(data_dir, monkeypatch, caplog) -> None:
    """A reader that cannot follow the folder says so and lists it at each change: nothing hidden."""

    monkeypatch.setattr(session_folder, "INotify", refuse_inotify)
    write(data_dir, 1)
    age_folder(data_dir)
    index = ListingIndex(DataRoot(data_dir))
    assert listed(index) == [session_id(1)]
    assert not index.folder.followed
    assert "cannot be followed" in caplog.text
    write(data_dir, 2)
    assert listed(index) == [session_id(2), session_id(1)]
    assert index.locate(session_id(2))[1].exists()
    index.close()


@pytest.mark.parametrize("followed", [True, False], ids=["followed", "unfollowed"])
def test_a_change_under_a_young_time_stamp_is_found_by_a_later_listing(
    data_dir, monkeypatch, followed
) -> None:
    """A change nothing reported that leaves the folder's time stamp as it was (stamps can be
    coarse) is found all the same: a folder listed while its stamp was young is listed again."""
    monkeypatch.setattr(INotify, "read", lambda self, timeout=None, read_delay=None: [])
    if not followed:
        monkeypatch.setattr(session_folder, "INotify", refuse_inotify)
    write(data_dir, 1)
    stamp = (data_dir / "sessions").stat().st_mtime_ns
    index = ListingIndex(DataRoot(data_dir))
    assert listed(index) == [session_id(1)]
    write(data_dir, 2)
    os.utime(data_dir / "sessions", ns=(stamp, stamp))
    deadline = time.monotonic() + 60
    while session_id(2) not in listed(index) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert listed(index) == [session_id(2), session_id(1)]
    index.close()


@pytest.mark.parametrize("followed", [True, False], ids=["followed", "unfollowed"])
def test_the_index_stays_what_the_folder_holds_under_churn(data_dir, monkeypatch, followed) -> None:
    """While sessions are created, moved over and removed, concurrent pages never list one twice;
    afterwards the index lists exactly the files in the folder, in order, as a new index does."""
    if not followed:
        monkeypatch.setattr(session_folder, "INotify", refuse_inotify)
    for number in range(0, 200, 2):
        write(data_dir, number, tenant="even")
    index = ListingIndex(DataRoot(data_dir))
    index.start_warming()
    done = threading.Event()
    problems: list[str] = []

    def page_through() -> None:
        while not done.is_set():
            seen: list[str] = []
            token = ""
            while True:
                page = list_sessions(index, page_size=17, page_token=token)
                seen += [listing.name.session_id for listing in page.sessions]
                token = page.next_page_token
                if not token:
                    break
            if len(seen) != len(set(seen)):
                problems.append("a session was listed twice in one walk")

    readers = [threading.Thread(target=page_through) for _ in range(2)]
    for thread in readers:
        thread.start()
    rng = random.Random(7)
    try:
        for number in range(1, 400, 2):
            write(data_dir, number, tenant="odd")
            files = sorted(path for path in (data_dir / "sessions").iterdir() if path.suffix == ".jsonl")
            if rng.random() < 0.3:
                rng.choice(files).unlink()
            if rng.random() < 0.2:  # a file moved over another's name (of the same tenant)
                source, target = rng.sample([path for path in files if path.exists()], 2)
                if int(source.name[-7:-6], 16) % 2 == int(target.name[-7:-6], 16) % 2:
                    os.replace(source, target)
    finally:
        done.set()
        for thread in readers:
            thread.join()
    assert problems == []
    truth = sorted(
        (name for name in os.listdir(data_dir / "sessions") if name.endswith(".jsonl")), reverse=True
    )
    expected = [name.split("_")[2].removesuffix(".jsonl") for name in truth]
    assert listed(index) == expected
    assert len(index.folder) == index.count("", "") == len(expected)
    fresh = ListingIndex(DataRoot(data_dir))
    assert listed(index, tenant="odd") == listed(fresh, tenant="odd")
    assert listed(index, tenant="even") == listed(fresh, tenant="even")
    index.close()
    fresh.close()


def _inotify_descriptors() -> int:
    return sum(
        os.readlink(fd) == "anon_inode:inotify" for fd in Path("/proc/self/fd").iterdir() if fd.exists()
    )


def test_a_closed_index_releases_its_watch_and_still_lists_every_session(data_dir) -> None:
    """Closing an index (a reader stopping) closes its inotify descriptor; the index then lists
    the folder at each change, so a session created after is still listed."""
    write(data_dir, 1)
    age_folder(data_dir)
    before = _inotify_descriptors()
    index = ListingIndex(DataRoot(data_dir))
    assert listed(index) == [session_id(1)]
    assert _inotify_descriptors() == before + 1
    index.close()
    assert _inotify_descriptors() == before
    write(data_dir, 2)
    assert listed(index) == [session_id(2), session_id(1)]
