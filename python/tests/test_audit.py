"""The audit tools themselves: they pass honest generators and catch leaky ones."""
import numpy as np
import pytest

import dpsynth
from dpsynth.audit import (assert_neighbour_safe, audit_datasets, distinguishing_audit, epsilon_lower_bound,
                           group_claim, neighbour_check, neighbour_steps)
from dpsynth.generators.independent import IndependentMarginals
from dpsynth.privacy import laplace_counts
from dpsynth.marginals import EncodedRows, count_marginal, count_with_missing


class SeenCellsOnly(IndependentMarginals):
    """A deliberately broken generator: a full joint histogram with noise added only to the cells
    seen in the private data (the support-leak bug of several open-source synthesisers)."""

    counts_only = False  # handed the encoded rows as an array

    def _fit(self, codes, data, source):
        sizes = self.schema_.domain_sizes
        counts = count_marginal(codes, range(len(sizes)), sizes).ravel()
        noisy = laplace_counts(counts, epsilon=self.epsilon, sensitivity=1, ledger=self.ledger, source=source,
                               step="joint", relation=self.relation)
        p = np.where(counts > 0, np.clip(noisy, 0, None), 0).astype(float)
        if p.sum() == 0:
            p = (counts > 0).astype(float)
        self.p_, self.sizes_, self.n_ = p / p.sum(), sizes, 40

    def _sample_codes(self, n, rng, index):
        flat = rng.choice(len(self.p_), size=n, p=self.p_)
        return np.column_stack(np.unravel_index(flat, self.sizes_))


class UnderstatedSensitivity(IndependentMarginals):
    """Declares sensitivity 1 but hands the noise counts scaled by 3."""

    counts_only = False  # handed the encoded rows as an array

    def _fit(self, codes, data, source):
        sizes = self.schema_.domain_sizes
        self.probs_ = []
        for j, size in enumerate(sizes):
            noisy = laplace_counts(3 * count_with_missing(codes, j, size), epsilon=self.epsilon / len(sizes),
                                   sensitivity=1, ledger=self.ledger, source=source, step=f"h{j}",
                                   relation=self.relation)
            p = np.clip(noisy, 0, None).astype(float) + 1e-9
            self.probs_.append(p / p.sum())
        self.n_ = 10


def test_epsilon_lower_bound_values():
    assert epsilon_lower_bound(0, 150, 0, 150) == pytest.approx(np.log((1 - 0.0243) / 0.0243), abs=0.05)
    assert epsilon_lower_bound(75, 150, 75, 150) == 0.0


def test_neighbour_check_passes_honest_generator(toy):
    df, schema = toy
    report = assert_neighbour_safe(lambda: IndependentMarginals(1.0), df, schema)
    assert set(report["neighbour"]) == {"remove", "add all-NA", "value to NA", "replace"}
    assert report["ok"].all()


def test_neighbour_check_catches_understated_sensitivity(toy):
    df, schema = toy
    with pytest.raises(AssertionError, match="declared sensitivity"):
        assert_neighbour_safe(lambda: UnderstatedSensitivity(1.0), df, schema)


def test_audit_passes_independent():
    res = distinguishing_audit("independent", epsilon=1.0, runs=100, seed=1)
    assert res["passed"], res


def test_group_claim_of_each_neighbour_kind():
    """A changed row is two add/remove steps (group privacy: 2ε, δ(1 + e^ε)) and one replace-one
    step; an added or removed row is no replace-one neighbour at all (n is public)."""
    kinds = ("remove", "add all-NA", "value to NA", "replace")
    assert [neighbour_steps("add-remove", k) for k in kinds] == [1, 1, 2, 2]
    assert [neighbour_steps("replace-one", k) for k in kinds] == [None, None, 1, 1]
    eps, delta = group_claim(0.5, 1e-6, 2)
    assert eps == 1.0 and delta == pytest.approx(1e-6 * (1 + np.exp(0.5)))
    assert group_claim(0.5, 1e-6, 1) == (0.5, 1e-6)
    assert group_claim(0.5, 1e-6, None) == (np.inf, 1.0)
    with pytest.raises(ValueError, match="relation"):
        neighbour_steps("bounded", "replace")


@pytest.mark.parametrize("method, pair, relation, factor", [
    ("independent", "replace", "add-remove", 2.0),
    ("independent", "add", "add-remove", 1.0),
    ("privbayes-e", "replace", "replace-one", 1.0),
    ("privbayes-e", "add", "replace-one", np.inf),
])
def test_audit_ceiling_follows_relation_and_pair(method, pair, relation, factor):
    """Issue 16: the distinguishing audit compares ε_lo with what the ledger's ε gives the pair under
    the generator's declared relation, not with the bare ε."""
    res = distinguishing_audit(method, epsilon=1.0, runs=10, n_synth=50, seed=2, pair=pair)
    assert res["relation"] == relation and res["pair"] == pair
    assert res["eps_claimed"] == pytest.approx(1.0)
    assert res["claim_epsilon"] == pytest.approx(factor * res["eps_claimed"])
    assert res["passed"] == (res["eps_lo"] <= res["claim_epsilon"] + 1e-9)


def test_audit_ceiling_decides_the_verdict(monkeypatch):
    """The same demonstrated ε_lo between ε and 2ε passes a changed row under add/remove and fails
    it under replace-one."""
    import dpsynth.audit.distinguishing as audit

    monkeypatch.setattr(audit, "epsilon_lower_bound", lambda *a, **k: 1.5)
    assert distinguishing_audit("independent", epsilon=1.0, runs=4, n_synth=10, seed=0)["passed"]
    assert not distinguishing_audit("privbayes-e", epsilon=1.0, runs=4, n_synth=10, seed=0)["passed"]


def test_audit_datasets_add_pair():
    d, d2, schema, target = audit_datasets(40, pair="add")
    assert len(d) == 40 and len(d2) == 41
    assert d2.iloc[-1].astype(object).to_dict() == target
    with pytest.raises(ValueError, match="pair"):
        audit_datasets(40, pair="swap")


def test_audit_detects_support_leak():
    res = distinguishing_audit(lambda: SeenCellsOnly(1.0), epsilon=1.0, runs=200, seed=1)
    assert not res["passed"] and res["eps_lo"] > 2, res


def test_audit_datasets_are_neighbours():
    d, d2, schema, _ = audit_datasets(40)
    assert len(d) == len(d2) == 40
    assert (d.iloc[:39].to_numpy() == d2.iloc[:39].to_numpy()).all()
    schema.validate(d2)


class PrivBayesDomainFromData(dpsynth.PrivBayes):
    """PrivBayesE that samples only values seen in the private data (reads the domain from the
    data, as DataSynthesizer and synthcity do) while claiming ε."""

    counts_only = False  # handed the encoded rows as an array

    def _fit(self, codes, data, source):
        super()._fit(EncodedRows(codes, self.schema_.domain_sizes), data, source)
        for i, (x, _) in enumerate(self.network_):
            seen = np.zeros(self.conditionals_[i].shape[1], dtype=bool)
            seen[np.unique(codes[:, x][codes[:, x] >= 0])] = True
            cond = np.where(seen[None, :], self.conditionals_[i], 0.0)
            cond[cond.sum(axis=1) == 0] = seen  # no mass left on seen values: uniform over them
            self.conditionals_[i] = cond / cond.sum(axis=1, keepdims=True)


def test_audit_privbayes_e_within_claim_and_detects_domain_leak():
    """Issue 10: PrivBayesE at ε = 1 audits at ε_lo ≤ 2 over 300 runs a side, and the same audit
    (600 runs a side) proves that a PrivBayes reading the category domain from the data leaks
    more than its claimed ε = 1."""
    honest = distinguishing_audit("privbayes-e", epsilon=1.0, runs=300, seed=7)
    assert honest["eps_lo"] <= 2.0 and honest["passed"], honest
    leaky = distinguishing_audit(lambda: PrivBayesDomainFromData(1.0, missing="partial"), epsilon=1.0, runs=600,
                                 seed=7)
    assert not leaky["passed"] and leaky["eps_lo"] > 1.5, leaky


# ---------------------------------------------------------------------- exact selection (hockey-stick) audit
def _selection_pair(toy, n=8):
    """A small D (n rows, some missing) and its neighbours with row 1 changed: the selection scores
    of a small table move by a sizeable part of their sensitivity."""
    from dpsynth.audit import neighbours

    df, schema = toy
    d = df.head(n).reset_index(drop=True)
    return d, neighbours(d, schema, 1), schema


SELECTORS = {
    "privbayes": lambda: dpsynth.PrivBayes(1.0, k=1),
    "privbayes-e": lambda: dpsynth.PrivBayes(1.0, k=1, missing="partial"),
    "napsu-mq (MST)": lambda: dpsynth.generators.make_generator("napsu-mq", 1.0, 1e-6, queries="mst",
                                                                inference="laplace", missing="available-case"),
}


@pytest.mark.parametrize("name", list(SELECTORS))
def test_selection_is_within_its_claim_exactly(name, toy):
    """Issue 10: the exact distribution of the selected structure (PrivBayes's network, MST's edges)
    on D and on each neighbour D', given the same earlier transcript: the privacy loss of the whole
    selection is at most the ε its ledger entries claim, and the hockey-stick divergence at that ε is
    0."""
    from dpsynth.audit import selection_audit

    d, near, schema = _selection_pair(toy)
    losses = []
    for kind, d2 in near.items():
        res = selection_audit(SELECTORS[name], d, d2, schema, seed=2)
        assert res["passed"], (kind, res)
        assert res["outcomes"] > 1 and res["hockey_stick"] == 0.0
        losses.append(res["loss"])
    assert max(losses) > 0  # the selection does read the data


def test_selection_audit_catches_an_overspending_selection(toy, monkeypatch):
    """Scores handed to the exponential mechanism at 10× their declared scale (so each round spends
    up to 10× the ε in the ledger): the exact loss exceeds the claim and the hockey-stick
    divergence at the claimed ε is positive."""
    from dpsynth.audit import selection_audit
    from dpsynth.generators import privbayes

    real = privbayes.exponential_mechanism
    monkeypatch.setattr(privbayes, "exponential_mechanism", lambda scores, **kw: real(10 * np.asarray(scores), **kw))
    d, near, schema = _selection_pair(toy)
    res = selection_audit(SELECTORS["privbayes"], d, near["replace"], schema, seed=2)
    assert not res["passed"] and res["loss"] > res["eps_claimed"] and res["hockey_stick"] > 0, res
