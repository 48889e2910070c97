"""The sessions folder as the reader knows it (reader_service.session_folder): current at every
call from inotify's reports, never resting on them (docs/spec.md §5, §7)."""

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


def folder_of(data_dir: Path) -> Path:
    """The sessions folder of a test's data root: made with one shard, so every session is in it."""
    root = DataRoot(data_dir)
    if not root.resolve():
        root.create(shards=1)
    return root.sessions_folder(0)


def path_of(data_dir: Path, number: int) -> Path:
    return folder_of(data_dir) / build_file_name(BASE + timedelta(seconds=number), session_id(number))


def write(data_dir: Path, number: int, tenant: str = "t") -> Path:
    """A session file as the writer publishes one: written under a temporary name, then linked
    to its own (one second after the previous number)."""
    folder = folder_of(data_dir)
    folder.mkdir(parents=True, exist_ok=True)
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
    os.utime(folder_of(data_dir), ns=(old, old))


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
    stamp = folder_of(data_dir).stat().st_mtime_ns
    index = ListingIndex(DataRoot(data_dir))
    assert listed(index) == [session_id(1)]
    overflow = Event(wd=-1, mask=flags.Q_OVERFLOW, cookie=0, name="")
    with monkeypatch.context() as lossy:
        lossy.setattr(INotify, "read", lambda self, timeout=None, read_delay=None: [overflow])
        write(data_dir, 2)
        os.utime(folder_of(data_dir), ns=(stamp, stamp))
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
    shutil.rmtree(folder_of(data_dir))
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
    stamp = folder_of(data_dir).stat().st_mtime_ns
    index = ListingIndex(DataRoot(data_dir))
    assert listed(index) == [session_id(1)]
    write(data_dir, 2)
    os.utime(folder_of(data_dir), ns=(stamp, stamp))
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
            files = sorted(path for path in folder_of(data_dir).iterdir() if path.suffix == ".jsonl")
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
        (name for name in os.listdir(folder_of(data_dir)) if name.endswith(".jsonl")), reverse=True
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


# -- many shards: one folder each -----------------------------------------------------------------


def sharded(data_dir: Path, shards: int = 8) -> DataRoot:
    """A data root of ``shards`` shards whose sessions folders all exist."""
    root = DataRoot(data_dir)
    root.create(shards=shards)
    for shard in range(shards):
        root.sessions_folder(shard).mkdir(parents=True)
    return root


def write_in(root: DataRoot, number: int) -> Path:
    """A session file (as :func:`write` makes one) in its shard's folder; returns its path."""
    created = BASE + timedelta(seconds=number)
    meta = {"session_id": session_id(number), "tenant": "t", "created_at": format_timestamp(created)}
    path = root.session_path(session_id(number), build_file_name(created, session_id(number)))
    temporary = path.with_name(f".{path.name}.tmp-{os.urandom(4).hex()}")
    temporary.write_bytes(encode_line(0, format_timestamp(created), "session_meta", meta))
    os.link(temporary, path)
    temporary.unlink()
    return path


def call_listings(index: ListingIndex) -> list[int]:
    """Listings made in calls, per shard folder."""
    return [folder.listings["call"] for folder in index.folder.shard_folders()]


def inotify_instances() -> int:
    """inotify instances this process holds open."""
    return sum(
        os.readlink(f"/proc/self/fd/{fd}") == "anon_inode:inotify"
        for fd in os.listdir("/proc/self/fd")
        if os.path.exists(f"/proc/self/fd/{fd}")
    )


def test_every_shard_folder_is_followed_through_one_inotify_instance(data_dir) -> None:
    """Eight shard folders are listed once and then followed through one inotify instance: sessions
    created in any of them are known from the reports alone."""
    root = sharded(data_dir)
    for number in range(8):
        write_in(root, number)
    before = inotify_instances()
    index = ListingIndex(DataRoot(data_dir))
    assert listed(index) == [session_id(n) for n in reversed(range(8))]
    assert index.folder.followed
    assert inotify_instances() == before + 1
    assert call_listings(index) == [1] * 8
    spread = {root.shard_of(session_id(n)) for n in range(8, 40)}
    for number in range(8, 40):
        write_in(root, number)
    assert len(spread) > 4
    assert listed(index) == [session_id(n) for n in reversed(range(40))]
    assert call_listings(index) == [1] * 8, "no folder is listed again"
    index.close()


def test_a_lookup_makes_its_own_shard_folder_current_and_no_other(data_dir, unreported, monkeypatch) -> None:
    """A lookup looks at its session's shard folder only (its time stamp, and with no reports, as
    for another host's change, a listing of it); a listing call looks at every folder."""
    root = sharded(data_dir)
    index = ListingIndex(DataRoot(data_dir))
    index.sync()
    assert call_listings(index) == [1] * 8
    stamped: list[Path] = []
    stamp = session_folder.SessionFolder.stamp
    monkeypatch.setattr(
        session_folder.SessionFolder, "stamp", lambda self: stamped.append(self.folder) or stamp(self)
    )
    path = write_in(root, 1)
    assert index.locate(session_id(1))[1] == path
    shard = root.shard_of(session_id(1))
    assert call_listings(index) == [2 if n == shard else 1 for n in range(8)]
    assert set(stamped) == {root.sessions_folder(shard)}
    stamped.clear()
    index.sync()
    assert sorted(set(stamped)) == [root.sessions_folder(n) for n in range(8)]
    index.close()


def test_lost_reports_have_every_shard_folder_listed(data_dir, monkeypatch) -> None:
    """A report of lost reports (the kernel's queue overflowed) reaches every folder: each is listed
    at the next listing call, and sessions made meanwhile are listed."""
    root = sharded(data_dir)
    folders = [root.sessions_folder(n) for n in range(8)]
    for folder in folders:  # old stamps: the changes below move none of them (see the restore)
        os.utime(folder, ns=(0, 0))
    index = ListingIndex(DataRoot(data_dir))
    index.sync()
    overflow = Event(wd=-1, mask=flags.Q_OVERFLOW, cookie=0, name="")
    with monkeypatch.context() as lossy:
        lossy.setattr(INotify, "read", lambda self, timeout=None, read_delay=None: [overflow])
        for number in range(6):
            write_in(root, number)
        for folder in folders:
            os.utime(folder, ns=(0, 0))  # only the lost-reports report tells of the changes
        assert listed(index) == [session_id(n) for n in reversed(range(6))]
    assert call_listings(index) == [2] * 8
    index.close()


def test_reports_no_call_takes_are_capped_and_that_folder_is_listed(data_dir, monkeypatch) -> None:
    """Reports for a folder that only other shards' lookups read are kept up to a cap; beyond it
    they count as lost, and that folder is listed at its next call, missing nothing."""
    monkeypatch.setattr(session_folder, "PENDING_REPORTS", 3)
    root = sharded(data_dir, shards=2)
    looked_up = next(n for n in range(100) if root.shard_of(session_id(n)) == 0)
    write_in(root, looked_up)
    index = ListingIndex(DataRoot(data_dir))
    index.sync()
    quiet = [n for n in range(100, 400) if root.shard_of(session_id(n)) == 1][:10]
    for number in quiet:
        write_in(root, number)
        index.locate(session_id(looked_up))  # reads every report; shard 1's wait for its folder
    assert call_listings(index) == [1, 1]
    assert set(listed(index)) == {session_id(n) for n in (looked_up, *quiet)}
    assert call_listings(index) == [1, 2]
    index.close()


def test_without_inotify_every_shard_folder_is_listed_at_each_change_and_said_once(
    data_dir, monkeypatch, caplog
) -> None:
    """No inotify instance to be had: every shard folder is listed when it changes, inotify is not
    asked again for each folder, and the reader says so once, not once per folder."""
    asked: list[object] = []

    def refused(*args: object, **kwargs: object) -> INotify:
        asked.append(args)
        return refuse_inotify()

    monkeypatch.setattr(session_folder, "INotify", refused)
    root = sharded(data_dir)
    write_in(root, 1)
    index = ListingIndex(DataRoot(data_dir))
    assert listed(index) == [session_id(1)]
    write_in(root, 2)
    assert listed(index) == [session_id(2), session_id(1)]
    assert not index.folder.followed
    assert len(asked) == 1
    assert caplog.text.count("cannot be followed") == 1
    index.close()


def test_a_listing_looks_at_every_shard_folder_stamp_once_per_sweep(
    data_dir, unreported, monkeypatch
) -> None:
    """A change nothing reported (another host's) is in a listing once a sweep looks at every
    folder's time stamp (not more often than the sweep interval); a lookup of its id finds it at
    once; this host's reported changes need no sweep."""
    monkeypatch.setattr(session_folder, "SWEEP_SECONDS", 3600)
    root = sharded(data_dir)
    for shard in range(8):
        os.utime(root.sessions_folder(shard), ns=(0, 0))  # old stamps: settled folders
    index = ListingIndex(DataRoot(data_dir))
    assert listed(index) == []
    write_in(root, 1)
    assert listed(index) == [], "not swept yet"
    assert index.locate(session_id(1))[1].exists()
    assert listed(index) == [session_id(1)]
    write_in(root, 2)
    assert listed(index) == [session_id(1)]
    index.folder.sweep_seconds = 0
    assert listed(index) == [session_id(2), session_id(1)]
    index.close()
