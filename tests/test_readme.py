"""The README's first spaCy example runs, and the shapes its comments state are the shapes it gives."""
import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"
SHAPE_COMMENT = re.compile(r"^(?P<expr>\S.*\.shape)\s+# \((?P<shape>[\d, ]+)\)")


def _quick_start() -> str:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    return next(block for block in blocks if "doc._.elmo.shape" in block)


def test_quick_start_shape_comments_are_true():
    namespace: dict = {}
    checked = []
    for line in _quick_start().splitlines():
        match = SHAPE_COMMENT.match(line)
        if match:
            shape = tuple(int(n) for n in match["shape"].split(","))
            assert eval(match["expr"], namespace) == shape, line
            checked.append(match["expr"])
        else:
            exec(line.split("#")[0].rstrip() or "pass", namespace)
    assert checked == ["doc._.elmo.shape", 'zh("宝玉在园中读书。")._.elmo.shape']
