"""The encoder check of a learned-feature report (compare/encoder_check.py): every candidate
file's rows, with their numbers as the files give them."""

from __future__ import annotations

import json

from captioning.compare.encoder_check import encoder_check, encoder_check_markdown


def test_each_candidate_file_is_a_row_with_its_own_numbers(tmp_path):
    (tmp_path / "cells.json").write_text(json.dumps({"cells": {
        "test/bleu4": 0.6504, "test/attr_acc": 0.99528, "test/grounding_ratio": 1.1839,
        "test/attn_entropy": 2.5987, "encoder_sha256": "ab" * 32, "best_epoch": 7, "machine": "m"}}))
    (tmp_path / "random.json").write_text(json.dumps({"random": {"test/bleu4": 0.5, "encoder_sha256": None}}))
    (tmp_path / "notes.txt").write_text("not a candidate")
    rows = encoder_check(tmp_path)
    assert [r["label"] for r in rows] == ["cells", "random"]
    table = encoder_check_markdown(rows, str(tmp_path)).splitlines()
    cells = next(line for line in table if line.startswith("| cells"))
    assert "| abababababababab |" in cells and "| 0.650 |" in cells and "| 0.995 |" in cells
    assert "| 1.18 | 2.60 | 7 | m |" in cells
    assert any(line.startswith("| random | random init | 0.500 |") for line in table)


def test_no_candidate_files_is_said_in_the_table(tmp_path):
    assert encoder_check(tmp_path / "absent") == []
    assert "no candidate files in" in encoder_check_markdown([], str(tmp_path / "absent"))
