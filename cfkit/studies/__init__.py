"""The studies built on the scoring: IM1/IM2 calibration (``calibration``), every method at its paper's settings
(``faithfulness``), the classifier's mistakes (``error_analysis``), which orderings survive the autoencoder
settings (``rank_stability``), LDCE's ablation and its record (``ablation``) and backbones trained until their
curve converges (``curve``). May import ``errors``, ``paths``, ``common``, ``data``, ``zoo``, ``methods`` and
``scoring``, never the layers above."""
