"""How many images the zoo's networks see at once when no gradient is needed.

The kit's CNNs are small: at 1000 images a batch their activations leave the CPU's caches, and inference over the
10,000 test digits on 2 threads took 2-4x longer than at 128 (oracle 10.1 s against 4.1, ``ae_all`` 5.4 against
1.5, classifier 2.1 against 0.8; measured 2026-12-05 on the 2-core machine).
"""
INFERENCE_BATCH = 128
