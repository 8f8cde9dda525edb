"""Evaluation: a model + datasets + a frozen decoding protocol → judged samples and metrics.

Three resumable stages per dataset: generate (`backends/`) → judge → aggregate (`metrics`).
"""
