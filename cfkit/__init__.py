"""cfkit: counterfactual explanations of an MNIST classifier, compared on the C3LT protocol.

Layers, lowest first (a module imports its own layer or a lower one, never a higher; ``tests/test_imports.py``
checks it): ``errors`` -> ``paths`` -> ``common`` -> ``data`` -> ``zoo`` -> ``methods`` -> ``scoring``
-> ``studies`` -> ``interactive`` -> ``running``. Submodules are imported on demand so ``import cfkit`` stays cheap.
"""

__version__ = "0.1.0"
