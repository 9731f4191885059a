"""The README runner: an example's output must match the text block after it,
an example with no output block must only run, and --update rewrites outputs."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from run_readme import check, examples

README = """# demo

```python
print("one")
```

```text
one
```

Prose, then an example with no output block:

```python
import os
print(os.getcwd() + "/x")
```

```python
print("two")
```

```text
three
```
"""


def test_examples_pair_code_with_the_text_block_right_after_it():
    found = examples(README.splitlines(keepends=True))
    assert [e.output is not None for e in found] == [True, False, True]


def test_a_wrong_output_is_reported_with_a_diff(tmp_path):
    path = tmp_path / "README.md"
    path.write_text(README)
    (problem,) = check(path, update=False)
    assert "-three" in problem and "+two" in problem


def test_a_failing_example_is_reported(tmp_path):
    path = tmp_path / "README.md"
    path.write_text("```python\nraise SystemExit('broken')\n```\n")
    (problem,) = check(path, update=False)
    assert "broken" in problem


def test_update_writes_what_the_examples_print(tmp_path):
    path = tmp_path / "README.md"
    path.write_text(README)
    assert check(path, update=True) == []
    assert "```text\ntwo\n```" in path.read_text()
    assert check(path, update=False) == []
