"""Structural rules of the codebase."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_core_imports_no_ui():
    """Importing every core module must not pull in Textual, Rich or tui."""
    modules = sorted(
        ".".join(p.relative_to(ROOT).with_suffix("").parts)
        for p in (ROOT / "core").rglob("*.py")
        if p.name != "__init__.py" or p.parent != ROOT / "core"
    )
    modules = [m.removesuffix(".__init__") for m in modules]
    code = (
        "import importlib, sys\n"
        f"for m in {modules!r}: importlib.import_module(m)\n"
        "bad = sorted(n for n in sys.modules if n.split('.')[0] in ('textual', 'rich', 'tui', 'plotext', 'textual_plotext'))\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "", f"core pulled in UI modules: {out.stdout.strip()}"
    assert len(modules) > 5


def test_core_sources_never_import_ui():
    for path in (ROOT / "core").rglob("*.py"):
        text = path.read_text()
        for banned in ("import textual", "from textual", "import rich", "from rich", "from tui", "import tui"):
            assert banned not in text, f"{path} contains {banned!r}"
