"""Multi-round repair: feedback built from the public tests only (`engine.isolation.public`), and
the loop that asks again.

One implementation serves evaluation (repair at inference) and training (repair rollouts):
`loop.repair` takes a `generate(conversations)` callable and a judge.
"""
