"""How far a marginal model's *structure* alone moves the full-width analysis' coefficients.

The issue "NAPSU-MQ at full width" asks for intervals of the logistic regression
income ~ age + education-num + hours-per-week + sex + race (numeric predictors at their bin index)
that cover the real-data coefficients. The predictors' joint table (16 · 16 · 16 · 2 · 5 = 40,960
cells) is far above :data:`dpsynth.analyses.MAX_JOINT_CELLS`, so NAPSU-MQ measures (income, X_j) for
each predictor and a private MST tree of predictor pairs (:func:`dpsynth.analyses.congenial_queries`).
A max-ent model with that structure carries only the dependence its tables carry; the coefficients it
implies can differ from the real ones however well the tables are measured. This script measures that
part alone, without noise: for each structure, the max-ent model fitted to the *exact* tables of the
bundled Adult (complete rows of the analysis' six columns; they have no missing values), 300,000
rows drawn from it, and the regression fitted to them, against the regression on the real rows
(bias in units of the real-data standard error).

Structures: ``selected`` (the tables NAPSU-MQ picks on the 15 columns, seed ``--seed``, those
within the analysis' columns: since 2026-11-29 a star of predictor pairs around the hub chosen from
the released (income, X_j) tables, :func:`dpsynth.analyses.star_cliques`), and hand-written ones:
``naive_bayes`` (every predictor linked to income only), ``mst_tree`` (the tree of predictor pairs
MST picked on seed 0 before the star: sex-hours, age-hours, sex-race, sex-education),
``two_tree_race_education`` (a 2-tree of predictor pairs that holds race-education, the largest
whose junction-tree cliques with income stay within max_cells = 1,024) and
``star_triples_education_sex`` (the star's cliques measured whole: (education, sex, X) tables).

Usage: python bench/napsu_structure.py [--seed 0] [--[no-]selection-penalty] [--rows 300000]
Prints progress on stderr and one JSON object on the last line of stdout.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

import _common
import napsu_scale as ns

COLUMNS = ["age", "education-num", "hours-per-week", "sex", "race", "income"]
WITH_INCOME = [("age", "income"), ("education-num", "income"), ("hours-per-week", "income"), ("sex", "income"),
               ("race", "income")]
HAND = {
    "naive_bayes": WITH_INCOME,
    "mst_tree": WITH_INCOME + [("sex", "hours-per-week"), ("age", "hours-per-week"), ("sex", "race"),
                               ("sex", "education-num")],
    "two_tree_race_education": WITH_INCOME + [("age", "education-num"), ("age", "sex"), ("education-num", "sex"),
                                              ("age", "hours-per-week"), ("hours-per-week", "sex"),
                                              ("education-num", "race"), ("race", "sex")],
    "star_triples_education_sex": WITH_INCOME + [("education-num", "sex", x) for x in ("age", "hours-per-week", "race")],
}


def coefficients(frame, schema):
    import statsmodels.formula.api as smf

    f = ns.bin_index(frame, schema)
    f = f.assign(income=(f["income"].astype(str) == ">50K").astype(int))
    fit = smf.logit(ns.regression(ns.ORDER), f).fit(disp=0)
    return fit.params, fit.bse


def implied(structure, codes, domain, schema, rows, rng):
    """Coefficients of ``rows`` drawn from the max-ent model fitted to the exact tables of ``structure``."""
    from dpsynth.graphical.estimation import GraphicalModel, NoisyTable

    tables = []
    for attrs in structure:
        idx = [COLUMNS.index(a) for a in attrs]
        shape = [domain.size(a) for a in attrs]
        counts = np.bincount(np.ravel_multi_index(codes[:, idx].T, shape), minlength=int(np.prod(shape)))
        tables.append(NoisyTable(tuple(attrs), counts.astype(float), 1.0, float(len(codes))))
    model = GraphicalModel(domain, structure).fit(tables, iters=3000)
    return coefficients(schema.decode(model.sample(rows, rng), rng), schema)[0]


def main(argv=None):
    import dpsynth
    from dpsynth.graphical import Domain

    ap = _common.parser(__doc__)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rows", type=int, default=300_000)
    _common.add_selection_penalty(ap)
    args = ap.parse_args(argv)
    options = _common.napsu_options(args)
    df, schema = dpsynth.load_dataset("adult")
    gen, _ = ns.built_model(df, schema, ns.ORDER, seed=args.seed, **options)
    structures = {"selected": [tuple(q) for q in gen.selected_queries_ if set(q) <= set(COLUMNS)], **HAND}
    s = schema.subset(COLUMNS)
    codes = s.encode(df[COLUMNS])
    domain = Domain(COLUMNS, s.domain_sizes)
    real, se = coefficients(df, schema)
    table = {"real": real, "real_se": se}
    rng = np.random.default_rng(args.seed)
    for name, structure in structures.items():
        table[name] = implied(structure, codes, domain, s, args.rows, rng)
        _common.log(f"{name}: {structure}")
    tab = pd.DataFrame(table)
    bias = {name: ((tab[name] - tab["real"]) / tab["real_se"]).round(2).to_dict() for name in structures}
    _common.log(tab.round(3).to_string())
    _common.emit({"machine": _common.machine(), "options": options, "seed": args.seed, "rows": args.rows,
                  "hubs": getattr(gen, "predictor_hubs_", {}),
                  "structures": {k: [list(q) for q in v] for k, v in structures.items()},
                  "coefficients": tab.round(4).to_dict(), "bias_in_real_se": bias,
                  "max_abs_bias_in_real_se": {k: float(np.max(np.abs(list(v.values())))) for k, v in bias.items()}})


if __name__ == "__main__":
    main()
