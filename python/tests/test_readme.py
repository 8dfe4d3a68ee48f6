"""The README's Python example runs as written (a doctest)."""

from __future__ import annotations

import doctest
from pathlib import Path

import pytest

from conftest import REPO


def test_readme_python_example(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = (REPO / "README.md").read_text()
    parser = doctest.DocTestParser()
    test = parser.get_doctest(text, {}, "README.md", str(REPO / "README.md"), 0)
    assert len(test.examples) >= 3, "the README lost its Python example"
    monkeypatch.chdir(tmp_path)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.attempted == len(test.examples)
    assert result.failed == 0
    assert (tmp_path / "sandlog-data" / "sandlog.db").is_file()
