"""The ledger's model-level claims applied to one profiled model (``experiments.model_profile``): the same rules
(``claims.rules``) with the claims' own ``params`` (``claims.yml``), so a verdict here means what it means in the
chapters.

Each claim asks something of every model it names; here it is asked of one model at a time, so a claim's
``min_models`` (how many models its verdict needs) is set to 1 and nothing else is changed: "anisotropic in some
layer" (``some_layer_above_null``), "bell-shaped" (``bell_shaped``, decoders only, as the claim is about decoders) and
"drift-correlated" (``drift_correlated`` on ``experiments.layerwise.drift_correlations``).
"""

from __future__ import annotations

import pandas as pd

from anisotropy.claims import ledger
from anisotropy.claims.rules.common import RULES
from anisotropy.experiments import layerwise

#: (what the verdict answers, the claim whose rule and params decide it, the frame its rule reads)
CHECKS = (("anisotropic in some layer", "p1-f1-token-anisotropic", "layers"),
          ("bell-shaped σ₁ share profile", "p2-f1-decoders-bell", "profiles"),
          ("mean cosine correlated with drift norm", "p1-s3.3-transformers-drift-correlated", "corr"))


def _inputs(rows: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """The frames the rules read, from one model's rows of the profile table."""
    return {"layers": rows, "profiles": rows, "corr": layerwise.drift_correlations(rows)}


def word(holds: bool | None, value: str) -> str:
    """holds / does not hold / too few layers (or the rule's reason it cannot decide)."""
    if holds is None:
        return "too few layers" if value.startswith("too few") else ledger.UNTESTABLE
    return ledger.HOLDS if holds else ledger.FAILS


def verdicts(table: pd.DataFrame) -> pd.DataFrame:
    """One row per model and check: ``label``, ``check``, ``claim`` (its ledger id), ``rule``, ``params`` (as
    applied), ``verdict`` (``word``) and ``numbers`` (the rule's own words)."""
    rows = []
    for label, part in table.groupby("label", sort=False):
        frames = _inputs(part)
        stack = str(part["stack"].iloc[0])
        for check, claim_id, frame in CHECKS:
            c = ledger.claim(claim_id)
            params = {**c.params, **({"min_models": 1} if "min_models" in c.params else {})}
            if "stack" in params and params["stack"] != stack:
                verdict, numbers = "not applicable", f"the claim is about {params['stack']}s; this is an {stack}"
            else:
                outcome = RULES[c.rule](frames[frame], **params)
                verdict, numbers = word(outcome.holds, outcome.value), outcome.value
            rows.append({"label": label, "check": check, "claim": claim_id, "rule": c.rule,
                         "params": ", ".join(f"{k}={v}" for k, v in params.items()), "verdict": verdict,
                         "numbers": numbers})
    return pd.DataFrame(rows)


def markdown(found: pd.DataFrame) -> str:
    """The verdicts as a short Markdown block: one heading per model, one line per check."""
    lines = []
    for label, part in found.groupby("label", sort=False):
        lines += [f"## {label}", ""]
        for r in part.itertuples():
            lines.append(f"- **{r.check}**: {r.verdict} ({r.rule}, {r.params}; claim {r.claim}): {r.numbers}")
        lines.append("")
    return "\n".join(lines)
