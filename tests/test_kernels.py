"""The chapter kernels (``anisotropy.book.kernels``): two at once from threads of one process, each with its own
environment, working folder and log, its CPU time and peak memory recorded, known to ``stop_kernels`` while it runs."""

from __future__ import annotations

import os
import threading

import nbformat

from anisotropy.book import kernels


def _notebook(path, code: str):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(code)])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)


def _run(tmp_path, tag: str, results: dict):
    import papermill

    cwd = tmp_path / f"cwd-{tag}"
    cwd.mkdir()
    src, out, log = tmp_path / f"{tag}.ipynb", tmp_path / f"{tag}.out.ipynb", tmp_path / "logs" / f"{tag}.log"
    _notebook(src, "import os, sys\n"
                   "print(os.environ['CHAPTER_TAG'], os.getcwd(), 'CHAPTER_GONE' in os.environ)\n"
                   "print('to the log', file=sys.__stderr__, flush=True)\n"
                   "sum(i * i for i in range(2_000_000))")
    env = {k: v for k, v in os.environ.items() if k != "CHAPTER_GONE"}
    env["CHAPTER_TAG"] = tag
    cpu, peak, seen = [], [], []
    with kernels.kernel(env, str(cwd), log, cpu, peak) as manager:
        class Watching(manager):
            async def start_kernel(self, **kw):
                await super().start_kernel(**kw)
                with kernels._KERNELS_LOCK:
                    seen.append(self.provisioner.pid in kernels._KERNELS)

        papermill.execute_notebook(str(src), str(out), kernel_name="python3", progress_bar=False, log_output=False,
                                   kernel_manager_class=Watching)
    printed = nbformat.read(out, as_version=4).cells[0].outputs[0]["text"]
    results[tag] = (printed, str(cwd), log.read_text(), cpu, peak, seen)


def test_kernels_run_side_by_side_with_their_own_environment_folder_and_log(tmp_path, monkeypatch):
    monkeypatch.setenv("CHAPTER_GONE", "1")  # in this process's environment, not in the kernels'
    before = os.getcwd()
    results: dict = {}
    threads = [threading.Thread(target=_run, args=(tmp_path, tag, results)) for tag in ("one", "two")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert set(results) == {"one", "two"}
    for tag, (printed, cwd, log, cpu, peak, seen) in results.items():
        assert printed.split() == [tag, cwd, "False"]
        assert "to the log" in log, log
        assert len(cpu) == 1 and cpu[0] > 0
        assert len(peak) == 1 and (peak[0] is None or peak[0] > 10 * 2**20)
        assert seen == [True], "a running kernel is known to stop_kernels"
    assert os.getcwd() == before and "CHAPTER_TAG" not in os.environ
    assert not kernels._KERNELS, "kernels are forgotten once their chapter is done"
