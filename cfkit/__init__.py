"""cfkit: counterfactual explanations of an MNIST classifier, compared on the C3LT protocol.

Layers, lowest first (nothing imports upward): ``data`` -> ``zoo`` -> ``methods`` -> ``metrics``
-> ``run``/notebooks. Submodules are imported on demand so ``import cfkit`` stays cheap.
"""

__version__ = "0.1.0"
