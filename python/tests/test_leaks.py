"""Issue 16: leaks that bypass the noise.

:func:`dpsynth.audit.leak_audit` fits a generator on a tiny table D and on its neighbours (a value set
to NA, a row removed, an all-NA row added, a row replaced) with the same seed, D's noise transcript
replayed on D'. Every released value is then D's, so everything the generator releases (row counts,
dtypes, categories, synthetic rows, diagnostics, the ledger, the saved file) must be identical; a
difference is information about D' that no ledgered mechanism released.
"""
import numpy as np
import pytest

from dpsynth.audit import leak_audit, leak_audit_data, leak_configurations
from dpsynth.cli import main
from dpsynth.generators import available_methods
from dpsynth.generators.independent import IndependentMarginals
from dpsynth.marginals import EncodedRows
from dpsynth.privacy import laplace_counts


class OnCodes(IndependentMarginals):
    """IndependentMarginals handed the encoded rows as an array (``counts_only = False``), so that
    the leaky subclasses below can look at them as a buggy generator would."""

    counts_only = False

    def _fit(self, codes, data, source):
        super()._fit(EncodedRows(codes, self.schema_.domain_sizes), data, source)


class ExactRowCount(OnCodes):
    """Releases the exact number of rows as the default synthetic size."""

    def _fit(self, codes, data, source):
        super()._fit(codes, data, source)
        self.n_ = len(codes)


class DtypeFollowsMissingness(OnCodes):
    """Hands back ``sex`` as plain objects instead of a categorical when the private data had a
    missing cell."""

    def _fit(self, codes, data, source):
        super()._fit(codes, data, source)
        self.saw_missing_ = bool((codes < 0).any())

    def _finish(self, frame):
        frame = super()._finish(frame)
        return frame.astype({"sex": object}) if self.saw_missing_ else frame


class StoresRowCount(OnCodes):
    """Keeps the exact number of rows in its state (it reaches the saved file, not the samples)."""

    def _fit(self, codes, data, source):
        super()._fit(codes, data, source)
        self.rows_seen_ = int(len(codes))


class ExtraMeasurementWhenMissing(OnCodes):
    """Measures the missingness pattern only when there is a missing cell: the ledger and the noise
    calls depend on the data."""

    def _fit(self, codes, data, source):
        total, self.epsilon = self.epsilon, self.epsilon / 2  # half for the histograms
        super()._fit(codes, data, source)
        self.epsilon = total
        if (codes < 0).any():
            laplace_counts(np.array([int((codes < 0).any(axis=1).sum())]), epsilon=total / 2, sensitivity=1,
                           ledger=self.ledger, source=source, step="rows with a missing cell",
                           relation=self.relation)


class CompleteRowsDiagnostic(OnCodes):
    """Reports the exact number of complete rows among its diagnostics."""

    def _fit(self, codes, data, source):
        super()._fit(codes, data, source)
        self.diagnostics_ = {"complete_rows": int((codes >= 0).all(axis=1).sum())}


# toy generator: (neighbour, item) where its leak shows, and a text the difference must contain
LEAKY = {
    ExactRowCount: [("remove", "default n", "11 vs 10"), ("add all-NA", "rows", "[11, 11] vs [12, 12]")],
    DtypeFollowsMissingness: [("value to NA", "dtypes", "sex: category vs object")],
    StoresRowCount: [("remove", "saved file values", "state.rows_seen_")],
    ExtraMeasurementWhenMissing: [("value to NA", "noise calls", "noise calls differ")],
    CompleteRowsDiagnostic: [("value to NA", "diagnostics values", "complete_rows")],
}


@pytest.mark.parametrize("leaky", list(LEAKY), ids=lambda c: c.__name__)
def test_leak_audit_catches_a_leaky_generator(leaky):
    """Each toy leak is flagged where it shows, and the honest generator it derives from is not
    flagged there (so the flag is the toy's leak, not another one)."""
    data = leak_audit_data(complete=True)  # D without a missing cell: one NA in D' is news
    report = leak_audit(lambda: leaky(1.0), data=data)
    honest = leak_audit(lambda: IndependentMarginals(1.0), data=data)
    for kind, item, text in LEAKY[leaky]:
        row = report[(report["neighbour"] == kind) & (report["item"] == item)]
        assert len(row) == 1 and row["leak"].all(), report[report["leak"]].to_string()
        assert text in row["difference"].iloc[0], row["difference"].iloc[0]
        clean = honest[(honest["neighbour"] == kind) & (honest["item"] == item)]
        assert not clean["difference"].str.contains(text, regex=False).any(), clean.to_string()


def test_leak_audit_covers_every_release_and_neighbour():
    """The honest baseline is compared on every item for every neighbour, and under replay even its
    synthetic rows come out identical (the criterion is exact equality, not a tolerance)."""
    report = leak_audit("independent", epsilon=1.0)
    assert set(report["neighbour"]) == {"value to NA", "remove", "add all-NA", "replace"}
    items = {"noise calls", "ledger", "relation", "default n", "rows", "columns", "dtypes", "categories",
             "synthetic values", "diagnostics keys", "diagnostics values", "saved file structure",
             "saved file values"}
    assert report.groupby("neighbour")["item"].apply(set).eq(items).all()
    assert report[report["item"] == "synthetic values"]["identical"].all()


def test_leak_audit_relation_decides_what_is_a_neighbour():
    """Under replace-one, n is public: a removed row changes PrivBayes's n without being a leak;
    a cell set to NA is a neighbour and must change nothing that PrivBayes releases beyond its noise."""
    report = leak_audit("privbayes-e", epsilon=1.0)
    removed = report[(report["neighbour"] == "remove") & (report["item"] == "default n")]
    assert not removed["identical"].iloc[0] and not removed["leak"].iloc[0]
    assert "not neighbours under replace-one" in removed["difference"].iloc[0]
    to_na = report[(report["neighbour"] == "value to NA") & (report["item"].isin(["default n", "rows", "ledger"]))]
    assert to_na["identical"].all()


def test_leak_configurations_cover_every_registered_generator():
    configs = leak_configurations()
    assert {m for m, _, _ in configs.values()} == set(available_methods())
    # the missing-data wrappers also run around a replace-one generator, whose n is public inside them
    assert configs["complete-rows[privbayes]"] == ("complete-rows", 100.0, {"generator": "privbayes"})


@pytest.mark.filterwarnings("ignore:complete-rows:UserWarning")
@pytest.mark.parametrize("label", list(leak_configurations()))
def test_registered_generator_releases_nothing_outside_the_ledger(label):
    """Issue 16: every registered generator (tiny settings) releases nothing about a neighbour
    outside its ledger: no exact row count, no dtype that follows the private missingness."""
    method, epsilon, options = leak_configurations()[label]
    report = leak_audit(method, epsilon, label=label, **options)
    assert len(report) and "replace" in set(report["neighbour"])
    leaks = report[report["leak"]]
    shown = leaks[["neighbour", "item", "difference"]].to_string()
    assert leaks.empty, f"{label} releases outside its ledger:\n{shown}"


def test_cli_audit_leaks(capsys):
    assert main(["audit", "--leaks", "--method", "pmse"]) == 0
    out = capsys.readouterr().out
    assert "pmse: PASSED (2 neighbours" in out and out.rstrip().endswith("nothing differs outside the ledger")


def test_cli_audit_needs_method_and_epsilon_without_leaks(capsys):
    assert main(["audit", "--method", "independent"]) == 2
    assert "--method and --epsilon" in capsys.readouterr().err
