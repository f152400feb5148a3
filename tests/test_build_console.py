"""A build that says what it is doing (issue 46): a line when a chapter starts and when it ends, and in between the
progress lines its computations write (``anisotropy.progress``), echoed from the chapter's log to the console, with a
line at least every minute."""

from __future__ import annotations

import re
import time

from anisotropy import progress
from anisotropy.book import runner


def test_say_writes_one_marked_line_to_the_process_stderr(capfd):
    progress.say("training mlm seed 0:\n update 10 of 100")
    err = capfd.readouterr().err
    assert err == progress.MARK + "training mlm seed 0: update 10 of 100\n"


def test_every_says_the_first_time_then_at_most_once_per_interval(capfd):
    beat = progress.Every(3600.0)
    made = []
    assert beat.say(lambda: made.append(1) or "first")
    assert not beat.say(lambda: made.append(1) or "second")  # within the hour: not said, not even made
    assert beat.say("forced", force=True)
    assert made == [1] and capfd.readouterr().err.count(progress.MARK) == 2


def test_the_echo_prints_a_chapters_progress_lines_and_only_those(tmp_path, capsys):
    log = tmp_path / "chapter.log"
    log.write_text("kernel noise\n" + progress.MARK + "measuring gpt2\n" + progress.MARK + "half a li")
    echo = runner._Echo("p2_layer_profiles", log)
    echo.tick()
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 1 and re.fullmatch(r"    p2_layer_profiles \[\s*\d+ s\] measuring gpt2", out[0])
    with open(log, "a") as stream:  # the line being written is echoed once it is whole
        stream.write("ne\n")
    echo.tick()
    assert capsys.readouterr().out.strip().endswith("] half a line")


def test_the_echo_says_a_silent_chapter_is_still_running(tmp_path, capsys):
    log = tmp_path / "chapter.log"
    log.write_text("")
    echo = runner._Echo("checkpoint_suites", log)
    echo.tick()
    assert capsys.readouterr().out == ""
    echo.last = time.perf_counter() - runner.SILENCE_S  # as if a minute went by without a line
    echo.tick()
    out = capsys.readouterr().out
    assert re.fullmatch(r"    checkpoint_suites \[\s*\d+ s\] still running \(no progress line in the last minute\)\n", out)


HEARTBEAT = "still running ("  # the runner's line after a minute without a progress line (runner._Echo)


def console_problems(text: str, names: list[str]) -> list[str]:
    """What a build's console ``text`` lacks for the chapters ``names``: each one's start and end lines; in a
    chapter that ran over a minute, at least one progress line of its own (the runner's "still running" heartbeat
    is not one: it says only that the chapter said nothing), and no stretch of a minute (plus a poll) without a line
    of it, heartbeats included."""
    problems = []
    ended = {m.group(1): float(m.group(2)) for m in re.finditer(r"^\[\d+/\d+\] (\S+)\s+profile=\S+\s+([\d.]+) s",
                                                                 text, flags=re.M)}
    for name in names:
        if not re.search(rf"^\[start\] {re.escape(name)}\s+profile=", text, flags=re.M):
            problems.append(f"{name}: no start line")
        if name not in ended:
            problems.append(f"{name}: no end line")
            continue
        if ended[name] <= 60:
            continue
        lines = re.findall(rf"^    {re.escape(name)} \[\s*(\d+) s\] (.*)$", text, flags=re.M)
        if not [line for _, line in lines if not line.startswith(HEARTBEAT)]:
            problems.append(f"{name}: ran {ended[name]:.0f} s and printed no progress line of its own")
        times = [0.0] + [float(t) for t, _ in lines]
        gaps = [b - a for a, b in zip(times, times[1:] + [ended[name]])]
        if max(gaps) > 60 + 2 * runner.ECHO_POLL_S:
            problems.append(f"{name}: silent for {max(gaps):.0f} s")
    return problems


def test_the_progress_check_refuses_a_chapter_that_only_the_heartbeat_speaks_for():
    """A chapter of 130 s whose only lines are the runner's "still running" fails the check, though the console was
    never silent a minute; with one progress line of its own it passes."""
    start = "[start] p1_s3_modalities            profile=smoke\n"
    end = "[1/1] p1_s3_modalities            profile=smoke     130.0 s (20 s CPU)\n"
    beats = "".join(f"    p1_s3_modalities [  {t} s] still running (no progress line in the last minute)\n"
                    for t in (56, 112))
    assert console_problems(start + beats + end, ["p1_s3_modalities"]) == [
        "p1_s3_modalities: ran 130 s and printed no progress line of its own"]
    own = "    p1_s3_modalities [   30 s] measuring wav2vec2-base (tiny) on 2 examples of espeak-speech\n"
    assert console_problems(start + own + beats + end, ["p1_s3_modalities"]) == []
    assert console_problems(start + own + end, ["p1_s3_modalities"]) == ["p1_s3_modalities: silent for 100 s"]
    assert console_problems(own + beats + end, ["p1_s3_modalities"]) == ["p1_s3_modalities: no start line"]


def test_the_smoke_builds_console_names_each_chapter_as_it_starts_and_ends_and_is_never_silent_a_minute(smoke_book):
    """Every executed chapter has its start line and its end line in the smoke build's console output; a chapter
    that ran over a minute prints progress lines of its own (the runner's heartbeat alone does not pass), and no
    stretch of a minute (plus a poll) passes without a line of it."""
    text = (smoke_book / "_build" / "smoke_build.log").read_text()
    assert console_problems(text, runner.chapters()) == []


def test_chapters_lists_the_book_and_one_chapters_parameters_with_the_profiles_values(capsys):
    """``anisotropy chapters``: every chapter of _toc.yml in order; with a name, each parameter of its parameters
    cell with its kind, the notebook's value and the profile's where it differs (read here from the profile's YAML);
    a misspelt name is one line naming the nearest chapter."""
    import yaml

    from anisotropy import paths
    from anisotropy.book import cli

    assert cli.main(["chapters"]) == 0
    listed = [line.split()[0] for line in capsys.readouterr().out.splitlines()[:-1]]
    assert listed == runner.chapters()
    assert cli.main(["chapters", "appendix_b_isotropic", "--profile", "smoke"]) == 0
    out = capsys.readouterr().out
    smoke = yaml.safe_load((paths.project_root() / "lib/anisotropy/profiles/smoke.yml").read_text())
    n_pairs = smoke["notebooks"]["appendix_b_isotropic"]["n_pairs"]
    assert f"n_pairs (number) = 40000; under smoke: {n_pairs!r}; allowed: at least 1\n" in out
    assert "seed (number) = 0; allowed: at least 0\n" in out
    assert cli.main(["chapters", "appendx_b"]) == 1
    assert "did you mean 'appendix_b_isotropic'?" in capsys.readouterr().err


def test_every_numeric_parameter_of_every_chapter_declares_its_range():
    """A number a reader can set is checked before the kernel starts (its rule in ``profiles/allowed.yml``), so a
    sweep over a wrong value stops in one line instead of inside the notebook; every profile's values are within
    those ranges. allowed.yml names only chapters of the book and parameters of their cells (a misspelt name would
    check nothing), and no parameters cell keeps an ``allowed:`` of its own in a comment (a second copy, unchecked)."""
    from anisotropy import profiles

    undeclared = [(chapter, name) for chapter in runner.chapters()
                  for name, value in profiles.notebook_parameters(chapter).items()
                  if isinstance(value, (int, float)) and not isinstance(value, bool)
                  and name not in profiles.parameter_rules(chapter)]
    assert undeclared == []
    declared = profiles.read_allowed(profiles.ALLOWED)
    assert set(declared) <= set(runner.chapters())
    assert {(c, name) for c, rules in declared.items() for name in rules} <= {
        (c, name) for c in declared for name in profiles.notebook_parameters(c)}
    assert [row["name"] for c in runner.chapters() for row in profiles.parameter_table(c)
            if "allowed:" in row["meaning"]] == []
    for profile in profiles.names():
        profiles.check_profile(profile, runner.chapters())


def _lines_from_threads(say, n_threads=4, n_lines=2000) -> list[str]:
    """What ``say`` prints from ``n_threads`` threads at once into a console whose ``write`` is Python code (as a
    pipe's is where it releases the GIL), with the interpreter switching threads as often as it can."""
    import contextlib
    import sys
    import threading

    class Console:
        def __init__(self):
            self.parts = []

        def write(self, text):
            self.parts.append(text)
            return len(text)

        def flush(self):
            pass

    out, interval = Console(), sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        with contextlib.redirect_stdout(out):
            threads = [threading.Thread(target=lambda k=k: [say(f"[start] item-{k}-{i} profile=smoke")
                                                              for i in range(n_lines)]) for k in range(n_threads)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
    finally:
        sys.setswitchinterval(interval)
    return "".join(out.parts).splitlines()


def test_lines_printed_from_several_threads_never_share_a_row():
    # The build prints its items' lines from one thread per slot; two start lines once shared a row, and the console
    # check then missed a chapter's start. Each line must arrive whole: as many rows as lines, each one line.
    from anisotropy.book import console

    rows = _lines_from_threads(console.line)
    assert len(rows) == 4 * 2000 and all(re.fullmatch(r"\[start\] item-\d+-\d+ profile=smoke", r) for r in rows)
