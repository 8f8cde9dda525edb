"""Datasets: sources → normalized `Problem`s, cached and fingerprinted; frozen id lists."""
