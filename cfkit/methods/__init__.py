"""Counterfactual methods, all with the same ``explain(x, target)`` shape (see ``base``)."""
