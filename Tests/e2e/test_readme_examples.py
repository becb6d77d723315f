"""scripts/readme_examples.py, the runner of README.md's examples, on a README of its own: what it counts as passed,
failed and not run (README.md's own blocks run in `make test`'s README stage)."""
import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]

README = """# A README

<!-- example: shell -->
```sh
echo hello
test -f README.md     # blocks declared `shell` run from the repository's root
```

<!-- example: shell -->
<!-- expect: hello -->
```sh
echo goodbye
```

<!-- example: shell -->
```sh
false
echo never reached
```

<!-- example: shell -->
```sh
sh -c 'exit 3' &      # a program meant to keep running that has stopped
```

<!-- example: shell -->
```sh
sleep 600 &           # still running at the end: passes, and is stopped
```

<!-- example: not run: needs a card reader -->
```sh
tessera passport read --mrz "$MRZ"
```

```sh
echo a block that says nothing of what it needs
```

```json
{"not": "a shell block"}
```
"""


def test_runner_counts_what_passed_failed_and_was_not_run(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text(README)
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "readme_examples.py"), "--readme", str(readme)],
                         capture_output=True, text=True, timeout=120,
                         env={**os.environ, "TMPDIR": str(tmp_path)})  # the failed run's scratch stays in tmp_path
    lines = out.stdout.splitlines()
    assert out.returncode == 1, out.stdout
    assert "README examples: 2 passed, 4 failed, 1 not run" in lines, out.stdout
    assert "ok   README.md:4 (shell" in out.stdout            # echo + test -f from the repository root
    assert "FAIL README.md:11 (shell)" in out.stdout           # output lacks the expected text
    assert "output lacks 'hello'" in out.stdout
    assert "FAIL README.md:16 (shell)" in out.stdout           # a failing command
    assert "never reached" not in out.stdout.split("FAIL README.md:16")[1].split("---")[1]
    assert "FAIL README.md:22 (shell)" in out.stdout           # a background program that exited
    assert "has exited" in out.stdout
    assert "ok   README.md:27 (shell" in out.stdout
    assert "NOT RUN README.md:32: needs a card reader" in lines
    assert "FAIL README.md:36: a shell block without" in out.stdout


def test_readme_md_declares_every_shell_block():
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "readme_examples.py"), "--list"],
                         capture_output=True, text=True, timeout=60, check=True)
    assert "UNDECLARED" not in out.stdout, out.stdout
    assert ": lab" in out.stdout


def test_the_examples_run_with_the_path_the_readme_tells_its_reader_to_set(tmp_path):
    """Issue #36: every README example calls `tessera`, the README never said to put the build on PATH, and the
    runner put it there itself. README.md says it once, at the top, and the runner takes PATH from that line."""
    text = (ROOT / "README.md").read_text()
    head = text[:text.index("## Two commands")]
    assert '<!-- example: path -->\n```sh\nexport PATH="$PWD/.build/debug:$PATH"\n```' in head
    readme = tmp_path / "README.md"
    readme.write_text('<!-- example: path -->\n```sh\nexport PATH="$PWD/not-the-build:$PATH"\n```\n\n'
                      '<!-- example: shell -->\n<!-- expect: /not-the-build: -->\n```sh\necho "$PATH"\n```\n')
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "readme_examples.py"), "--readme", str(readme)],
                         capture_output=True, text=True, timeout=120, env={**os.environ, "TMPDIR": str(tmp_path)})
    assert out.returncode == 0, out.stdout
    assert "README examples: 1 passed, 0 failed, 0 not run" in out.stdout, out.stdout
