"""The book's one figure style, and one function per figure kind, in one module per part of the book: ``style`` (the
style, and what figures of several parts share), ``suites`` (Foundations: the checkpoint suites), ``p1_s3``,
``p1_s4`` and ``p1_s5`` (Paper 1's sections), ``p2`` (Paper 2), ``beyond`` (Beyond the papers: the ablation and
the profile command), ``appendices`` and ``closing`` (the closing page's tally).

Functions take tidy pandas frames (one row per observation) and return a matplotlib ``Figure``; chapters glue the
figure with ``pages.report.glue_figure`` and caption it with the paper figure it reproduces. Chapters call them
through this package, ``from anisotropy.pages import plots; plots.layer_cosines(...)``: every name below stays
importable from here (they were one module, ``pages/plots.py``, before it was split by part of the book).

May import: ``measure`` (Appendix B's exact isotropic null).
"""

from anisotropy.pages.plots.style import PAGE_WIDTH, PALETTE, empty_figure, figure, use_style  # noqa: F401
from anisotropy.pages.plots.suites import recipe_sweep, suite_accuracy, suite_loss_curves  # noqa: F401
from anisotropy.pages.plots.p1_s3 import drift_pvalues, layer_cosines  # noqa: F401
from anisotropy.pages.plots.p1_s4 import (  # noqa: F401
    attention_entropy, block_input_output, drift_reference, head_score_shift, query_key_geometry, score_histograms,
    score_histograms_all_heads, softmax_rows)
from anisotropy.pages.plots.p1_s5 import (  # noqa: F401
    MAX_LAYER_LEGEND, QK_COLOURS, qk_attention_entropy, qk_concatenated_by_seed, qk_entropy_by_run, qk_head_statistic,
    qk_projection, qk_statistic_by_run, qk_trajectories)
from anisotropy.pages.plots.p2 import (  # noqa: F401
    P2_METRIC_LABELS, paper2_dimension_over_training, paper2_final_norm, paper2_layer_profiles, paper2_planted_measures,
    paper2_profiles_over_training, paper2_robust_profiles, paper2_two_measures)
from anisotropy.pages.plots.beyond import (  # noqa: F401
    ABLATION_LABELS, ABLATION_MARKERS, LOG_SPREAD, ablation_loss_curves, ablation_over_training,
    ablation_sharp_vs_isotropic, layer_measure)
from anisotropy.pages.plots.appendices import (  # noqa: F401
    FAMILY_COLOURS, ORIGIN_MARKERS, cosine_null_densities, cosine_null_quantiles, measured_builds)
from anisotropy.pages.plots.closing import VERDICT_COLOURS, verdicts_by_question  # noqa: F401
