"""scikit-learn-style estimators fitted with aggrate's own solvers.

Each takes the feature layout (``m``, ``sigma``, ``context``) and the solver's parameters, fits
on the layout's feature columns of a DataFrame from :func:`aggrate.read_capture` (or on an array
of exactly those columns), and keeps the fitted :class:`aggrate.Model` in ``model_`` — the model
file ``aggrate recv --model`` and the online estimator load. ``score`` is the F1 of frame starts
(the study's measure), not accuracy. With scikit-learn installed they are ``BaseEstimator`` /
``ClassifierMixin`` subclasses, so ``cross_val_score``, pipelines and ``clone`` work.
"""

from __future__ import annotations

import json
from typing import Any, Dict, List, Optional

import numpy as np
import polars as pl

from . import _aggrate

try:  # scikit-learn is optional: without it the estimators still fit, predict and score.
    from sklearn.base import BaseEstimator as _Base
    from sklearn.base import ClassifierMixin as _Classifier
except ImportError:  # pragma: no cover - exercised only without scikit-learn

    class _Base:  # type: ignore[no-redef]
        def get_params(self, deep: bool = True) -> Dict[str, Any]:
            return {k: getattr(self, k) for k in self._param_names()}

        def set_params(self, **params: Any) -> "_Base":
            for k, v in params.items():
                setattr(self, k, v)
            return self

    class _Classifier:  # type: ignore[no-redef]
        pass


def feature_names(m: int = 20, sigma: bool = True, context: int = 0, n_max: int = 64) -> List[str]:
    """The feature columns of a layout, in order (as :func:`aggrate.read_capture` names them)."""
    return _aggrate.layout(m, sigma, context, n_max)[1]


def _matrix(X: Any, names: List[str]) -> np.ndarray:
    if isinstance(X, pl.DataFrame):
        missing = [c for c in names if c not in X.columns]
        if missing:
            raise ValueError(f"the DataFrame has no column(s) {missing[:3]}: read it with the estimator's m/sigma/context")
        X = X.select(names).to_numpy()
    elif hasattr(X, "columns") and hasattr(X, "loc"):  # pandas
        X = X[names].to_numpy()
    X = np.ascontiguousarray(np.asarray(X, dtype=np.float64))
    if X.ndim != 2 or X.shape[1] != len(names):
        raise ValueError(f"X must have {len(names)} feature columns ({names[0]} … {names[-1]}), got shape {X.shape}")
    return X


def _labels(y: Any) -> np.ndarray:
    if isinstance(y, pl.Series):
        y = y.to_numpy()
    return np.ascontiguousarray(np.asarray(y).astype(bool))


def f1_score(y_true: Any, y_pred: Any) -> float:
    """F1 of the positive class (frame starts)."""
    t, p = _labels(y_true), _labels(y_pred)
    tp = int(np.sum(t & p))
    fp = int(np.sum(~t & p))
    fn = int(np.sum(t & ~p))
    return 0.0 if tp == 0 else 2 * tp / (2 * tp + fp + fn)


class _AggrateClassifier(_Classifier, _Base):
    _kind = ""
    _solver_params: tuple = ()

    def _param_names(self) -> List[str]:
        return ["m", "sigma", "context", "n_max", *self._solver_params]

    @property
    def feature_names_(self) -> List[str]:
        return feature_names(self.m, self.sigma, self.context, self.n_max)

    def fit(self, X: Any, y: Any) -> "_AggrateClassifier":
        names = self.feature_names_
        Xm = _matrix(X, names)
        yv = _labels(y)
        if len(yv) != Xm.shape[0]:
            raise ValueError(f"y has {len(yv)} labels for {Xm.shape[0]} rows")
        params = {k: getattr(self, k) for k in self._solver_params}
        spec, _ = _aggrate.layout(self.m, self.sigma, self.context, self.n_max)
        self.model_ = _aggrate.fit(
            self._kind,
            Xm.tobytes(),
            yv.astype(np.uint8).tobytes(),
            Xm.shape[0],
            spec,
            json.dumps(params),
        )
        self.classes_ = np.array([False, True])
        self.n_features_in_ = len(names)
        return self

    def decision_function(self, X: Any) -> np.ndarray:
        model = self._fitted()
        Xm = _matrix(X, model.feature_names)
        return np.frombuffer(model.decision_function(Xm.tobytes(), Xm.shape[0]), dtype="<f8").copy()

    def predict(self, X: Any) -> np.ndarray:
        return self.decision_function(X) > 0.0

    def score(self, X: Any, y: Any, sample_weight: Optional[Any] = None) -> float:
        """F1 of frame starts (not accuracy)."""
        if sample_weight is not None:
            raise ValueError("score: sample weights are not supported")
        return f1_score(y, self.predict(X))

    def _fitted(self) -> "_aggrate.Model":
        model = getattr(self, "model_", None)
        if model is None:
            raise AttributeError(f"{type(self).__name__} is not fitted: call fit first")
        return model


class LogisticRegression(_AggrateClassifier):
    """L2-regularised logistic regression (Newton/IRLS on standardised features).

    ``l2``: penalty as scikit-learn's 1/C per row-sum; ``balanced``: weight the classes equally.
    """

    _kind = "logistic"
    _solver_params = ("l2", "max_iter", "tol", "balanced")

    def __init__(self, m: int = 20, sigma: bool = True, context: int = 0, n_max: int = 64,
                 l2: float = 1.0, max_iter: int = 50, tol: float = 1e-8, balanced: bool = False):
        self.m = m
        self.sigma = sigma
        self.context = context
        self.n_max = n_max
        self.l2 = l2
        self.max_iter = max_iter
        self.tol = tol
        self.balanced = balanced


class LinearSVC(_AggrateClassifier):
    """Linear SVM by dual coordinate descent (liblinear's solver); ``loss``: "squared_hinge" or
    "hinge"."""

    _kind = "svm"
    _solver_params = ("c", "loss", "max_epochs", "tol", "seed")

    def __init__(self, m: int = 20, sigma: bool = True, context: int = 0, n_max: int = 64,
                 c: float = 1.0, loss: str = "squared_hinge", max_epochs: int = 1000, tol: float = 0.1,
                 seed: int = 1):
        self.m = m
        self.sigma = sigma
        self.context = context
        self.n_max = n_max
        self.c = c
        self.loss = loss
        self.max_epochs = max_epochs
        self.tol = tol
        self.seed = seed


class ThresholdClassifier(_AggrateClassifier):
    """The m = 1 baseline: a frame starts when the newest gap exceeds one learned threshold (µs)."""

    _kind = "threshold"
    _solver_params = ()

    def __init__(self, m: int = 1, sigma: bool = False, context: int = 0, n_max: int = 64):
        self.m = m
        self.sigma = sigma
        self.context = context
        self.n_max = n_max
