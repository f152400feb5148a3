"""The library off POSIX: ``import anisotropy``, every module of it, a measurement and the file locks (``paths.
write_folder_once``, the build's core ``executor.Slots``) work where ``fcntl`` and ``resource`` do not exist (Windows),
simulated in a subprocess; and the locks' semantics (one holder per slot, a slot freed when its holder ends or dies,
one writer per cache folder)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

from conftest import ROOT, run_guarded

NO_POSIX = textwrap.dedent(r'''
    import sys
    sys.modules["fcntl"] = None  # `import fcntl` raises ImportError, as on Windows
    sys.modules["resource"] = None
    for name in ("fcntl", "resource"):
        try:
            __import__(name)
        except ImportError:
            pass
        else:
            raise SystemExit(f"{name} is still importable")

    import importlib
    import os
    import pkgutil
    import tempfile
    from pathlib import Path

    import numpy as np

    import anisotropy

    names = [m.name for m in pkgutil.walk_packages(anisotropy.__path__, "anisotropy.")
             if m.name != "anisotropy.__main__"]
    for name in names:
        importlib.import_module(name)  # raises what walk_packages would swallow
    assert len(names) > 20, names
    assert "fcntl" not in sys.modules or sys.modules["fcntl"] is None
    assert "resource" not in sys.modules or sys.modules["resource"] is None

    from anisotropy import executor, paths
    from anisotropy.book import runner
    from anisotropy.measure import metrics

    # a measurement, against brute force over the ordered pairs i != j
    x = np.random.default_rng(0).standard_normal((40, 8)) + 0.5
    u = x / np.linalg.norm(x, axis=1, keepdims=True)
    cos = u @ u.T
    brute = (cos.sum() - np.trace(cos)) / (len(x) * (len(x) - 1))
    assert abs(metrics.mean_cosine(x) - brute) < 1e-6, (metrics.mean_cosine(x), brute)

    with tempfile.TemporaryDirectory() as tmp:
        # the cache's write-once folder
        target = Path(tmp) / "cache" / "thing"
        def write(folder):
            (folder / "payload.txt").write_text("ok")
            (folder / "conversion.json").write_text("{}")
        assert paths.write_folder_once(target, write) == target
        assert (target / "conversion.json").is_file() and (target / "payload.txt").read_text() == "ok"
        def fail(folder):
            raise AssertionError("a complete folder is written once")
        assert paths.write_folder_once(target, fail) == target

        # the build's core slots, as a chapter's kernel finds them
        slots = executor.Slots.create(2, Path(tmp) / "slots")
        os.environ[executor.SLOTS_ENV] = str(slots.folder)
        found = executor.Slots.from_env()
        assert found is not None and len(found) == 2
        a, b = found.take(), found.take()
        assert a is not None and b is not None and found.take() is None
        executor.Slots.release(a)
        c = found.take()
        assert c is not None and found.take() is None
        executor.Slots.release(b)
        executor.Slots.release(c)
        assert executor.slots_free(found)

    # the one POSIX-only call degrades: this process's own CPU time
    cpu = runner._cpu_seconds()
    assert isinstance(cpu, float) and cpu >= 0, cpu
    print("portable", len(names))
''')


def test_the_library_imports_and_measures_without_fcntl_and_resource():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "lib"), os.environ.get("PYTHONPATH", "")])}
    proc = run_guarded([sys.executable, "-c", NO_POSIX], expected_s=120, cwd=ROOT, env=env, capture_output=True,
                       text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "portable" in proc.stdout


def test_a_slot_has_one_holder_at_a_time_and_is_taken_again_once_released(tmp_path):
    from anisotropy import executor

    slots = executor.Slots.create(2, tmp_path / "slots")
    first, second = slots.take(), slots.take()
    assert first is not None and second is not None and first is not second
    assert slots.take() is None  # both cores busy: a third holder gets nothing
    assert not executor.slots_free(slots)
    executor.Slots.release(first)
    again = slots.take()
    assert again is not None and slots.take() is None
    # a slot taken in one thread can be given back from another (the build's thread, a map's callback)
    releaser = threading.Thread(target=executor.Slots.release, args=(again,))
    releaser.start()
    releaser.join()
    assert executor.slots_free(slots)
    executor.Slots.release(second)
    executor.Slots.release(None)  # no slot taken: nothing to give back
    assert len(slots) == 2  # releasing keeps the slots (on Windows too, where a lock's file goes on release)


def test_a_slot_held_by_another_process_is_freed_when_that_process_dies(tmp_path):
    from anisotropy import executor

    slots = executor.Slots.create(1, tmp_path / "slots")
    holder = textwrap.dedent(f'''
        import sys, time
        from anisotropy import executor
        lock = executor.Slots({str(slots.folder)!r}).take()
        print("held" if lock is not None else "none", flush=True)
        time.sleep(600)
    ''')
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "lib"), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-c", holder], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout.readline().strip() == "held"
        assert slots.take() is None  # the other process holds the only core
    finally:
        proc.kill()  # a killed kernel: no release, the OS drops its lock
        proc.wait()
    lock = slots.take()
    assert lock is not None
    executor.Slots.release(lock)


def test_write_folder_once_lets_one_writer_in_and_the_other_finds_its_folder(tmp_path):
    from anisotropy import paths

    target = tmp_path / "cache" / "conversion"
    calls = []

    def write(folder: Path) -> None:
        calls.append(threading.get_ident())
        time.sleep(0.5)  # the second caller arrives meanwhile and waits on the lock
        (folder / "conversion.json").write_text("{}")

    threads = [threading.Thread(target=paths.write_folder_once, args=(target, write)) for _ in range(2)]
    for t in threads:
        t.start()
        time.sleep(0.1)
    for t in threads:
        t.join()
    assert len(calls) == 1 and (target / "conversion.json").is_file()
    assert [p.name for p in target.parent.iterdir() if not p.name.endswith(".lock")] == ["conversion"]
