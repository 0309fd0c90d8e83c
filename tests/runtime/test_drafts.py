"""Drafts made before the request (`runtime/drafts.py`, `as2d draft`): stored on disk, bounded,
and used by as2d in place of a drafter process, with the target's output unchanged."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from as2d.cli import main
from as2d.options import Options, drafter_spec, preparing
from as2d.runtime.drafts import DraftStore, StoredDraft, drafter_needed, stored_drafts
from as2d.runtime.spec import DrafterSpec
from as2d.types import Window

DATA = Path(__file__).resolve().parents[1] / "data"
CLIP = DATA / "asterisk" / "en" / "demo-nogo.wav"


def test_drafts_are_keyed_by_content_drafter_input_task_and_language(tmp_path):
    copy = tmp_path / "copy.wav"
    shutil.copy(CLIP, copy)
    other = tmp_path / "other.wav"
    other.write_bytes(CLIP.read_bytes()[:-2] + b"\1\1")
    spec = DrafterSpec("whisper-tiny.en")
    keys = {
        DraftStore.key(CLIP, spec),
        DraftStore.key(other, spec),
        DraftStore.key(CLIP, DrafterSpec("ct2:whisper-tiny.en")),
        DraftStore.key(CLIP, DrafterSpec("whisper-base", task="translate")),
        DraftStore.key(CLIP, DrafterSpec("whisper-base", language="fr")),
        DraftStore.key(CLIP, DrafterSpec("whisper-tiny.en", tail_s=None)),
        DraftStore.key(CLIP, DrafterSpec("whisper-tiny.en", tail_s=2.0)),
    }
    assert len(keys) == 7
    assert DraftStore.key(copy, spec) == DraftStore.key(CLIP, spec)  # content, not name


def test_recordings_are_prepared_by_the_drafter_that_agrees_best_and_requests_find_them(
    tmp_path,
):
    """Nobody waits for drafts made ahead, so they come from the target's own int8 copy, not
    the fast live drafter; a request with the default drafter finds them where it has none of
    its own, and its own first where both are kept (a bench compares drafters that way)."""

    def ahead(options: Options) -> tuple[str, float | None]:
        prepared = preparing(options)
        return prepared.drafter, prepared.drafter_tail_s

    assert ahead(Options()) == ("ct2:whisper-base", 1.0)
    assert ahead(Options(target="whisper-tiny.en")) == ("ct2:whisper-tiny.en", 1.0)
    assert ahead(Options(drafter="whisper-tiny.en")) == ("whisper-tiny.en", 1.0)  # named
    assert ahead(Options(target=str(tmp_path))) == ("auto", 1.0)  # not a bundled target
    options = Options(drafts_dir=str(tmp_path / "drafts"), language="en")
    live = drafter_spec(options)
    assert live is not None
    store = DraftStore(tmp_path / "drafts")
    window = StoredDraft(0.0, 1.0, " prepared")
    full = replace(live, name="ct2:whisper-base", tail_s=None)
    store.save(store.key(CLIP, full), [StoredDraft(0, 1, " full")])
    assert stored_drafts(options, CLIP) is None  # another input's drafts: not preparation's
    store.save(store.key(CLIP, replace(live, name="ct2:whisper-base")), [window])
    found = stored_drafts(options, CLIP)
    assert found is not None and found.text(0) == " prepared"
    store.save(store.key(CLIP, live), [StoredDraft(0.0, 1.0, " own")])
    found = stored_drafts(options, CLIP)
    assert found is not None and found.text(0) == " own"
    named = replace(options, drafter="whisper-tiny.en")  # a drafter named: its drafts only
    assert stored_drafts(named, CLIP) is None


def test_drafts_made_with_no_language_serve_a_request_that_names_one(tmp_path):
    """A recording prepared with the language unset (the drafter guesses it) serves a request
    in a named language; drafts in that very language come first, another language's never."""
    options = Options(drafts_dir=str(tmp_path / "drafts"), language="en")
    spec = drafter_spec(options)
    assert spec is not None
    store = DraftStore(tmp_path / "drafts")
    store.save(store.key(CLIP, replace(spec, language="fr")), [StoredDraft(0.0, 1.0, " fr")])
    assert stored_drafts(options, CLIP) is None
    store.save(store.key(CLIP, replace(spec, language=None)), [StoredDraft(0.0, 1.0, " any")])
    found = stored_drafts(options, CLIP)
    assert found is not None and found.text(0) == " any"
    store.save(store.key(CLIP, spec), [StoredDraft(0.0, 1.0, " en")])
    found = stored_drafts(options, CLIP)
    assert found is not None and found.text(0) == " en"


@pytest.mark.slow
def test_bench_drafts_each_recording_in_the_language_its_requests_name(tmp_path, capsys):
    """A manifest of two languages: `--drafts ready` drafts each recording in its own language,
    so its requests find every draft (none were found before, and as2d ran as target-only)."""
    clips = {"en": "demo-nogo", "es": "dir-intro"}
    for language, name in clips.items():
        shutil.copy(DATA / "asterisk" / language / f"{name}.wav", tmp_path)
    rows = [{"audio": f"{name}.wav", "language": lang} for lang, name in clips.items()]
    (tmp_path / "m.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "out"
    args = ["bench", str(tmp_path / "m.jsonl"), "--methods", "as2d", "--drafters", "whisper-base"]
    args += ["--budgets", "4", "--drafts", "ready", "--no-progress", "--out", str(out)]
    assert main(args) == 0, capsys.readouterr().err
    results = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    ready = [r for r in results if r["method"] == "as2d"]
    assert {r["recording"] for r in ready} == set(clips.values())
    # found: most tokens come from the drafts (before, only from the window's own history)
    assert all(r["accepted_tokens"] >= r["tokens"] / 2 for r in ready), ready


def test_the_store_keeps_the_most_recently_used_drafts_within_its_size(tmp_path):
    store = DraftStore(tmp_path / "drafts", max_bytes=3000)
    text = "word " * 100  # about 600 bytes a file
    for i in range(4):
        store.save(f"k{i}", [StoredDraft(0.0, 30.0, text)])
        os.utime(store.root / f"k{i}.json", (1000 + i, 1000 + i))
    assert store.load("k0") is not None  # used now: the most recent
    for i in range(4, 8):
        store.save(f"k{i}", [StoredDraft(0.0, 30.0, text)])
        os.utime(store.root / f"k{i}.json", (2000 + i, 2000 + i))
    kept = sorted(p.stem for p in store.root.glob("*"))
    assert sum(p.stat().st_size for p in store.root.glob("*")) <= 3000
    assert "k1" not in kept and "k7" in kept  # the oldest went first
    assert all(p.suffix == ".json" for p in store.root.iterdir())  # no temporary file left
    drafts = store.load("k7")
    assert drafts is not None and drafts.text(0) == text
    assert drafts.covers(Window(0, 0.0, 30.0, None))  # type: ignore[arg-type]
    assert not drafts.covers(Window(0, 0.5, 30.0, None))  # type: ignore[arg-type]
    assert not drafts.covers(Window(1, 30.0, 40.0, None))  # type: ignore[arg-type]


def _transcribe(out: Path, *args: str) -> dict:
    assert main(["transcribe", str(CLIP), "--format", "json", "-o", str(out), *args]) == 0
    return json.loads((out / f"{CLIP.stem}.json").read_text())


def test_stored_drafts_stand_in_for_the_drafter_process(tmp_path):
    store = tmp_path / "drafts"
    assert main(["draft", str(CLIP), "--store", str(store)]) == 0
    options = Options(drafts_dir=str(store))
    assert stored_drafts(options, CLIP) is not None
    assert stored_drafts(Options(drafts_dir=str(store), drafts="off"), CLIP) is None
    # The one rule of the command line and of each Ray worker: no drafter process where every
    # file's drafts are stored, however long; one where a file has none.
    assert not drafter_needed(options, [str(CLIP)], [600.0])
    ungated = Options(drafts_dir=str(store), draft_gate=False)  # whatever this machine's costs
    assert drafter_needed(ungated, [str(CLIP), str(DATA / "long_en.flac")], [600.0, 600.0])
    expected = _transcribe(tmp_path / "target", "--method", "target")
    got = _transcribe(tmp_path / "as2d", "--store", str(store))
    assert [w["token_ids"] for w in got["windows"]] == [w["token_ids"] for w in expected["windows"]]
    assert got["stats"]["drafter"] is None  # no drafter process was started
    assert sum(w["accepted_tokens"] for w in got["windows"]) > 0


def test_wrong_stored_drafts_change_nothing(tmp_path):
    store = DraftStore(tmp_path / "drafts")
    spec = DrafterSpec("auto")  # as2d's default drafter, language and task
    windows = _transcribe(tmp_path / "target", "--method", "target")["windows"]
    wrong = [StoredDraft(w["start"], w["end"], " zebra quantum " * 20) for w in windows]
    store.save(DraftStore.key(CLIP, spec), wrong)
    got = _transcribe(tmp_path / "as2d", "--store", str(store.root))
    assert [w["token_ids"] for w in got["windows"]] == [w["token_ids"] for w in windows]
    assert got["stats"]["drafter"] is None


MALFORMED = {
    "wrong types": b'{"windows": [{"start": "x", "end": null, "text": 5}]}',
    "no text": b'{"windows": [{"start": 0.0, "end": 6.0}]}',
    "a field more": b'{"windows": [{"start": 0.0, "end": 6.0, "text": "hi", "by": 1}]}',
    "windows not a list": b'{"windows": 3}',
    "a list": b"[1, 2]",
    "a string": b'"windows"',
    "not json": b"\xff\x00{",
    "deeply nested": b"[" * 100_000,
}


@pytest.mark.parametrize("content", MALFORMED.values(), ids=MALFORMED.keys())
def test_a_malformed_store_file_is_ignored_and_removed(tmp_path, content):
    store = DraftStore(tmp_path)
    (tmp_path / "k.json").write_bytes(content)
    assert store.load("k") is None
    assert not (tmp_path / "k.json").exists()


def test_transcribe_goes_on_past_malformed_store_files(tmp_path):
    """Store files for three recordings, each malformed in its own way: the command
    transcribes all three as if nothing were stored, and drops the files."""
    store = DraftStore(tmp_path / "drafts")
    store.root.mkdir()
    files = sorted(CLIP.parent.glob("*.wav"))[:3]
    spec = drafter_spec(Options(target="whisper-tiny.en"))  # the command's drafter
    assert spec is not None
    cases = ("wrong types", "no text", "a field more")
    for file, case in zip(files, cases, strict=True):
        key = DraftStore.key(file, spec)
        (store.root / f"{key}.json").write_bytes(MALFORMED[case])
    out = tmp_path / "out"
    command = ["transcribe", *map(str, files), "--target", "whisper-tiny.en", "--no-progress"]
    proc = subprocess.run(
        [sys.executable, "-m", "as2d.cli", *command, "--store", str(store.root), "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    assert all((out / f"{f.stem}.txt").read_text().strip() for f in files)
    assert list(store.root.glob("*.json")) == []


def test_no_drafter_starts_for_a_command_shorter_than_its_start_up(tmp_path):
    """A one-off command over one short clip: the drafter process would be ready only after
    the target's encoder (torch's import and its model, beside the target's), so it is not
    started; files that are longer together start it, as does a gate turned off."""
    options = Options(drafts_dir=str(tmp_path / "drafts"))
    assert not drafter_needed(options, [str(CLIP)], [10.5])
    assert not drafter_needed(options, [str(CLIP)] * 2, [10.5, 10.5])
    assert drafter_needed(replace(options, draft_gate=False), [str(CLIP)], [10.5])
    got = _transcribe(tmp_path / "as2d", "--drafts", "off")  # nothing stored stands in
    assert got["stats"]["drafter"] is None  # no drafter process was started
