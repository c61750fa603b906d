"""An rpart-like classification tree for propensity scores (pMSE), built on scikit-learn.

R's ``rpart(method = "class")``, as synthpop's ``utility.gen`` calls it, (1) chooses splits by Gini,
(2) needs ``minsplit`` rows to try a split and ``minbucket`` rows in each child, and (3) keeps a split
only if it lowers the *misclassification risk* by more than α = cp × (root risk) per extra leaf:
the tree is the cost-complexity-pruned subtree at α, with the risk being the number of
misclassified rows (Therneau & Atkinson, "An introduction to recursive partitioning using the RPART
routines", §4 and §8). rpart does not cross-validate-prune unless asked.

The emulation here: grow a scikit-learn ``DecisionTreeClassifier`` with Gini, ``min_samples_split =
minsplit``, ``min_samples_leaf = minbucket``, ``max_depth = maxdepth``; then prune it to the minimal
cost-complexity subtree for the misclassification risk at α = cp × min(n₀, n₁) (bottom-up: a split is
kept only if its subtree's risk + α·leaves is strictly below the node's risk + α). This reproduces
rpart's pruning rule on the grown tree. It is still approximate:

- categorical predictors: rpart orders the levels by the class-1 proportion *in each node* and splits
  the ordered levels optimally; here the levels are ordered once, by their class-1 proportion in the
  whole table (exact at the root, an approximation below it; ``ordered_codes``);
- ties between equally good splits, surrogate splits and rpart's handling of missing values differ
  (missing numerics are left to scikit-learn's NaN support; indicator columns are added by the caller);
- ``ccp_alpha`` and ``min_impurity_decrease`` of scikit-learn are Gini-based and are NOT used: they do
  not match rpart's risk-based ``cp`` (see shared/reference/pmse.md §4).

Example
-------
>>> import numpy as np
>>> X = np.r_[np.zeros(50), np.ones(50)].reshape(-1, 1); t = np.r_[np.zeros(50), np.ones(50)]
>>> tree = RpartLikeTree(cp=0.01).fit(X, t)
>>> tree.n_splits_, tree.predict_proba1(X)[[0, -1]].tolist()
(1, [0.0, 1.0])
"""
from __future__ import annotations

import numpy as np
import pandas as pd
from sklearn.tree import DecisionTreeClassifier


class RpartLikeTree:
    """Gini tree with rpart's ``minsplit``, ``minbucket``, ``maxdepth`` and risk-based ``cp``.

    rpart's defaults are ``minsplit=20``, ``minbucket=round(minsplit/3)=7``, ``cp=0.01``,
    ``maxdepth=30``; synthpop's ``utility.gen`` passes ``cp=1e-3, minbucket=5``.
    """

    def __init__(self, cp: float = 0.01, minsplit: int = 20, minbucket: int = 7, maxdepth: int = 30,
                 random_state=0):
        if not cp >= 0:
            raise ValueError(f"cp must be >= 0, got {cp}")
        if minsplit < 2 or minbucket < 1:
            raise ValueError("minsplit must be >= 2 and minbucket >= 1")
        self.cp, self.minsplit, self.minbucket, self.maxdepth = float(cp), int(minsplit), int(minbucket), int(maxdepth)
        self.random_state = random_state

    def fit(self, X, t) -> "RpartLikeTree":
        t = np.asarray(t).astype(int)
        if set(np.unique(t)) - {0, 1}:
            raise ValueError("the response must be 0/1")
        tree = DecisionTreeClassifier(criterion="gini", min_samples_split=self.minsplit,
                                      min_samples_leaf=self.minbucket, max_depth=self.maxdepth,
                                      random_state=self.random_state)
        tree.fit(X, t)
        st = tree.tree_
        left, right = st.children_left, st.children_right
        n = st.weighted_n_node_samples
        if st.value.shape[2] == 2:
            n1 = np.rint(st.value[:, 0, 1] * n) if np.allclose(st.value[0, 0].sum(), 1.0) else st.value[:, 0, 1]
        else:  # a single class in the data
            n1 = n * float(t.max())
        risk = np.minimum(n1, n - n1)
        alpha = self.cp * risk[0]
        # bottom-up: cost of the best subtree below each node; children have larger ids than parents
        keep = np.zeros(st.node_count, dtype=bool)
        cost = risk + alpha
        for node in range(st.node_count - 1, -1, -1):
            if left[node] == -1:
                continue
            split_cost = cost[left[node]] + cost[right[node]]
            if split_cost < cost[node] - 1e-12:
                keep[node] = True
                cost[node] = split_cost
        # the pruned leaf that holds each node: the first non-kept node on its root path
        rep = np.arange(st.node_count)
        for node in range(st.node_count):
            if left[node] == -1:
                continue
            inherited = rep[node] if (rep[node] != node or not keep[node]) else None
            for child in (left[node], right[node]):
                rep[child] = child if inherited is None else inherited
        self.tree_ = tree
        self._rep = rep
        self._p1 = np.divide(n1, n, out=np.zeros_like(n, dtype=float), where=n > 0)
        self.n_splits_ = int(self._count_kept(keep, left, right))
        return self

    @staticmethod
    def _count_kept(keep, left, right) -> int:
        """Kept splits reachable from the root through kept splits only."""
        count, stack = 0, [0]
        while stack:
            node = stack.pop()
            if keep[node]:
                count += 1
                stack.extend([left[node], right[node]])
        return count

    def predict_proba1(self, X) -> np.ndarray:
        """P(t = 1) of the pruned leaf holding each row (in-sample propensity scores)."""
        leaves = self.tree_.apply(X)
        return self._p1[self._rep[leaves]]


def ordered_codes(x: pd.Series, t: np.ndarray) -> np.ndarray:
    """Codes of a categorical column ordered by the level's proportion of t = 1 (missing is a level),
    so that threshold splits on the codes are the optimal level subsets at the root (Breiman et al.
    1984, Thm 4.5; what rpart does in every node for a binary response)."""
    labels = x.astype(object).where(x.notna(), "\0NA").astype(str).to_numpy()
    levels, inv = np.unique(labels, return_inverse=True)
    share = np.bincount(inv, weights=t, minlength=len(levels)) / np.bincount(inv, minlength=len(levels))
    rank = np.empty(len(levels), dtype=float)
    rank[np.argsort(share, kind="stable")] = np.arange(len(levels))
    return rank[inv]
