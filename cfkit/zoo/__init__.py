"""Every trained network of the kit: architectures, training loops and checkpoints."""
