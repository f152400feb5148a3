"""``python -m anisotropy profile`` (issue 47): the table equals the library's own per-layer measures of the same model
on the same texts, a GGUF file works offline, a second call reads the store, and every bad input stops in one line."""

import numpy as np
import pandas as pd
import pytest
import torch

from anisotropy.book import cli
from anisotropy.claims.rules import p1_s3
from anisotropy.data import sources
from anisotropy.experiments import layerwise, model_profile, spectral
from anisotropy.measure import metrics, taps
from anisotropy.models import memory, registry
from anisotropy.models.identity import identity

N = 24  # examples of the prose: a few thousand token vectors per layer of a tiny model


@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch):
    """Each test its own results store and cache, and no network."""
    monkeypatch.setenv("ANISOTROPY_RESULTS", str(tmp_path / "results"))
    monkeypatch.setenv("ANISOTROPY_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def _tiny_folder(path, name: str):
    """A tiny random registry model of ``name``'s class, saved as a transformers folder with its tokenizer."""
    loaded = registry.load(name, variant="tiny")
    loaded.model.save_pretrained(path)
    loaded.preprocessor.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def tiny_gpt2(tmp_path_factory):
    return _tiny_folder(tmp_path_factory.mktemp("tiny") / "tiny-gpt2", "gpt2")


def _run(capsys, *args) -> tuple[int, str, str]:
    code = cli.main(["profile", *map(str, args)])
    out = capsys.readouterr()
    return code, out.out, out.err


def _table(out) -> pd.DataFrame:
    return pd.read_parquet(out / "profile.parquet")


def _direct(folder, texts, max_length=128, seed=0) -> pd.DataFrame:
    """The same measures by calling taps, layerwise and spectral directly on the loaded folder."""
    loaded = registry.load(folder)
    loaded.model = loaded.model.base_model
    extraction = taps.extract(loaded, texts, batch_size=8, max_length=max_length, seed=seed,
                              stats_factory=layerwise.stats_factory("moments", 0, seed))
    lw = layerwise.frame_of(extraction, loaded)
    size = min(4096, int(lw["n"].min()))
    count = max(1, min(4, int(lw["n"].min()) // size))
    sp = spectral.measure(loaded, texts, batch_size=size, n_batches=count, max_length=max_length,
                          metric_names=("sigma1_share", "twonn_dimension"), shuffle_seed=seed)
    return lw.drop(columns=["sigma1_share", "twonn_dimension"]).merge(
        sp.groupby("layer")[["sigma1_share", "twonn_dimension"]].mean().reset_index(), on="layer")


def _hidden_rows(folder, texts, max_length=128):
    """Content-token hidden states per layer computed here with transformers alone: the ground truth of the
    Paper 1 columns (padding removed; GPT-2's tokenizer adds no special token)."""
    loaded = registry.load(folder)
    tok, model = loaded.preprocessor, loaded.model.base_model
    per_layer: dict[int, list] = {}
    with torch.inference_mode():
        for start in range(0, len(texts), 8):
            enc = tok(texts[start:start + 8], padding=True, truncation=True, max_length=max_length,
                      return_tensors="pt", padding_side="right")
            keep = enc["attention_mask"].bool().reshape(-1)
            hs = model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"],
                       output_hidden_states=True).hidden_states
            for i, h in enumerate(hs):
                per_layer.setdefault(i, []).append(h.reshape(-1, h.shape[-1])[keep].double())
    return {i: torch.cat(v).numpy() for i, v in per_layer.items()}


@pytest.mark.parametrize("name", ["gpt2", "bert-base-uncased"])
def test_table_equals_the_librarys_own_measures_of_a_tiny_folder(name, tmp_path, capsys):
    folder = _tiny_folder(tmp_path / f"tiny-{name}", name)
    code, printed, _ = _run(capsys, folder, "--n", N, "--out", tmp_path / "out")
    assert code == 0
    table = _table(tmp_path / "out")
    direct = _direct(folder, sources.load("prose", N, seed=0))
    assert list(table["layer"]) == list(direct["layer"])
    for column in ("mean_cosine", "mean_cosine_low", "mean_cosine_high", "drift_norm", "mean_norm", "n", "dim",
                   "null_q95", "relative_depth", "sigma1_share", "twonn_dimension"):
        assert table[column].tolist() == direct[column].tolist(), column  # exact: the same computation
    assert table["null_q95"].tolist() == layerwise.null_q95(table["dim"]).tolist()
    assert table["ratio_to_null"].tolist() == (table["mean_cosine"] / table["null_q95"]).tolist()
    # every layer holds the same vectors; the batches are one of all of them (fewer than 4096), recorded
    assert (table["spectral_vectors"] == table["n"].min()).all()
    assert (table["spectral_batch_size"] * table["spectral_n_batches"] == table["spectral_vectors"]).all()
    for png in ("mean_cosine", "sigma1_share", "twonn_dimension", "drift_norm", "mean_norm"):
        assert (tmp_path / "out" / f"{png}.png").stat().st_size > 0
    assert (tmp_path / "out" / "profile.csv").is_file()
    verdicts = (tmp_path / "out" / "verdicts.md").read_text()
    assert "## " in verdicts and verdicts.strip() in printed


def test_paper1_columns_against_hidden_states_computed_here(tiny_gpt2, tmp_path, capsys):
    texts = sources.load("prose", N, seed=0)
    assert _run(capsys, tiny_gpt2, "--n", N, "--out", tmp_path)[0] == 0
    table = _table(tmp_path)
    rows = _hidden_rows(tiny_gpt2, texts)
    assert sorted(rows) == table["layer"].tolist()
    for layer, x in rows.items():
        got = table[table["layer"] == layer].iloc[0]
        assert got["n"] == len(x)
        np.testing.assert_allclose(got["mean_cosine"], metrics.mean_cosine(x), rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(got["drift_norm"], np.linalg.norm(x.mean(0)), rtol=1e-4)
        np.testing.assert_allclose(got["mean_norm"], np.linalg.norm(x, axis=1).mean(), rtol=1e-4)
        assert got["mean_cosine_low"] <= got["mean_cosine"] <= got["mean_cosine_high"]


def test_verdicts_are_the_ledgers_rules_on_the_table(tiny_gpt2, tmp_path, capsys):
    assert _run(capsys, tiny_gpt2, "--n", N, "--out", tmp_path)[0] == 0
    table = _table(tmp_path)
    text = (tmp_path / "verdicts.md").read_text()
    above = int((table["mean_cosine_low"] > table["null_q95"]).sum())
    line = next(x for x in text.splitlines() if "anisotropic in some layer" in x)
    assert ("does not hold" if above == 0 else "holds") in line and f"{above} of {len(table)}" in line
    assert p1_s3.some_layer_above_null(table, at_least=1).holds is (above >= 1)
    # two blocks: three layers, fewer than the bell's 5 and the correlation's 6
    assert "bell-shaped σ₁ share profile**: too few layers" in text
    assert "drift norm**: too few layers" in text


def test_a_second_call_reads_the_store(tiny_gpt2, tmp_path, capsys, monkeypatch):
    assert _run(capsys, tiny_gpt2, "--n", N, "--out", tmp_path / "a")[0] == 0
    stored = sorted((tmp_path / "results" / model_profile.STORE_CHAPTER).glob("*.parquet"))
    assert len(stored) == 1

    def never(*args, **kwargs):
        raise AssertionError("measured again")

    monkeypatch.setattr(model_profile, "measure", never)
    assert _run(capsys, tiny_gpt2, "--n", N, "--out", tmp_path / "b")[0] == 0
    assert _table(tmp_path / "a").equals(_table(tmp_path / "b"))
    assert sorted((tmp_path / "results" / model_profile.STORE_CHAPTER).glob("*.parquet")) == stored
    # other data is another key
    monkeypatch.undo()
    monkeypatch.setenv("ANISOTROPY_RESULTS", str(tmp_path / "results"))
    assert _run(capsys, tiny_gpt2, "--n", N + 1, "--out", tmp_path / "c")[0] == 0
    assert len(list((tmp_path / "results" / model_profile.STORE_CHAPTER).glob("*.parquet"))) == 2


def test_text_file_lines_and_paragraphs(tiny_gpt2, tmp_path, capsys):
    lines = sources.load("prose", N, seed=1)
    (tmp_path / "lines.txt").write_text("\n".join(lines) + "\n")
    (tmp_path / "paras.txt").write_text("\n\n".join(f"{t[:len(t) // 2]}\n{t[len(t) // 2:]}" for t in lines))
    assert model_profile.read_texts(tmp_path / "lines.txt") == [t.strip() for t in lines]
    assert len(model_profile.read_texts(tmp_path / "paras.txt")) == len(lines)
    assert _run(capsys, tiny_gpt2, "--text", tmp_path / "lines.txt", "--out", tmp_path / "out")[0] == 0
    direct = _direct(tiny_gpt2, [t.strip() for t in lines])
    assert _table(tmp_path / "out")["mean_cosine"].tolist() == direct["mean_cosine"].tolist()


def test_a_gguf_file_works_offline(tmp_path, capsys):
    pytest.importorskip("gguf")
    from test_real_models import write_tiny_llama_gguf

    path = tmp_path / "tiny-llama.gguf"
    write_tiny_llama_gguf(path)
    code, printed, err = _run(capsys, path, "--n", 8, "--out", tmp_path / "out")
    assert code == 0, err
    table = _table(tmp_path / "out")
    assert table["label"].unique().tolist() == ["tiny-llama"]
    assert table["layer"].tolist() == [0, 1, 2] and (table["dim"] == 64).all()
    folder = registry.gguf_folder(path)  # the conversion made by the command, found again in the cache
    direct = _direct(folder, sources.load("prose", 8, seed=0))
    assert table["mean_cosine"].tolist() == direct["mean_cosine"].tolist()
    assert table["sigma1_share"].tolist() == direct["sigma1_share"].tolist()


def _one_line_error(capsys, *args) -> str:
    code, _, err = _run(capsys, *args)
    assert code == 1
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


def test_bad_inputs_stop_in_one_line(tiny_gpt2, tmp_path, capsys, monkeypatch):
    out = tmp_path / "out"
    assert "no such file" in _one_line_error(capsys, tmp_path / "missing.gguf", "--out", out)
    assert "no such folder or file" in _one_line_error(capsys, tmp_path / "nowhere" / "model", "--out", out)
    (tmp_path / "empty").mkdir()
    assert "has no config.json" in _one_line_error(capsys, tmp_path / "empty", "--out", out)
    assert "not in the local Hugging Face cache" in _one_line_error(capsys, "someone/no-such-model@v1", "--out", out)
    assert "unknown model 'gtp2'" in _one_line_error(capsys, "gtp2", "--out", out)
    assert "at least one example" in _one_line_error(capsys, tiny_gpt2, "--n", 0, "--out", out)
    assert "at least one token" in _one_line_error(capsys, tiny_gpt2, "--max-length", 0, "--out", out)
    assert "--text" in _one_line_error(capsys, tiny_gpt2, "--text", tmp_path / "missing.txt", "--out", out)
    (tmp_path / "short.txt").write_text("a few words\n")
    line = _one_line_error(capsys, tiny_gpt2, "--text", tmp_path / "short.txt", "--out", out)
    assert f"fewer than {model_profile.MIN_VECTORS}" in line
    vit = registry.load("vit-base", variant="tiny")
    vit.model.save_pretrained(tmp_path / "tiny-vit")
    vit.preprocessor.save_pretrained(tmp_path / "tiny-vit")
    assert "is a vision model" in _one_line_error(capsys, tmp_path / "tiny-vit", "--n", N, "--out", out)
    monkeypatch.setattr(memory, "available_bytes", lambda device: 1000)
    assert "GiB is free" in _one_line_error(capsys, tiny_gpt2, "--n", N, "--out", out)
    assert not out.exists()  # nothing written for a failed command
    assert not list((tmp_path / "results").glob(f"{model_profile.STORE_CHAPTER}/*.parquet"))


def test_store_key_follows_the_weights(tiny_gpt2, tmp_path):
    """A folder is keyed by its files' content: a changed weight is another key, a copy elsewhere the same."""
    import shutil

    a = identity(tiny_gpt2)
    copy = shutil.copytree(tiny_gpt2, tmp_path / "copy")
    assert identity(copy) == a
    (copy / "model.safetensors").write_bytes((copy / "model.safetensors").read_bytes()[:-1] + b"\x01")
    assert identity(copy) != a
    assert model_profile.Target.parse("owner/name@step10") == model_profile.Target("owner/name", "step10")


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_a_gpu_asked_for_without_one_stops_in_one_line(tiny_gpt2, tmp_path, capsys):
    assert "has no GPU" in _one_line_error(capsys, tiny_gpt2, "--n", N, "--device", "cuda", "--out", tmp_path)


def test_a_registry_models_tiny_variant_is_its_tiny_folder(tiny_gpt2, tmp_path, capsys):
    """``--variant tiny`` measures the registry's tiny random model (the smoke profile's stand-in on the profile
    page): the same weights as the folder that model was saved to, so the same rows, under a label that says so."""
    assert _run(capsys, "gpt2", "--variant", "tiny", "--n", N, "--out", tmp_path / "v")[0] == 0
    assert _run(capsys, tiny_gpt2, "--n", N, "--out", tmp_path / "f")[0] == 0
    variant, folder = _table(tmp_path / "v"), _table(tmp_path / "f")
    for column in ("layer", "n", "mean_cosine", "drift_norm", "sigma1_share", "twonn_dimension"):
        assert variant[column].tolist() == folder[column].tolist(), column
    assert set(variant["label"]) == {f"{registry.spec('gpt2').display} (tiny)"}
    # a variant exists only for a registry entry: a folder given with one stops in one line
    code, _, err = _run(capsys, tiny_gpt2, "--variant", "untrained", "--n", N, "--out", tmp_path / "x")
    assert code != 0 and len(err.strip().splitlines()) == 1 and "registry name" in err


@pytest.mark.parametrize("peaks, log", [((1.0, 1000.0), True), ((1.0, 2.0), False), ((0.0, 1000.0), False)])
def test_a_measure_of_models_of_different_scales_is_drawn_on_a_log_axis(peaks, log):
    """plots.layer_measure: a logarithmic axis when the models' largest values are more than LOG_SPREAD apart and
    every value is positive (a zero has no logarithm), else a linear one."""
    import matplotlib.pyplot as plt

    from anisotropy.pages import plots

    depth = [0.0, 0.5, 1.0]
    frame = pd.DataFrame({"label": ["a"] * 3 + ["b"] * 3, "relative_depth": depth * 2,
                          "drift_norm": [peaks[0] / 2, peaks[0], peaks[0] / 2] + [peaks[1] / 2, peaks[1], 1.0]})
    fig = plots.layer_measure(frame, "drift_norm")
    assert fig.axes[0].get_yscale() == ("log" if log else "linear")
    plt.close(fig)
