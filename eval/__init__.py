"""Evaluation: BEIR-format data sets, metrics and reports."""
