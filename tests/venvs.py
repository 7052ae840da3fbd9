"""A virtual environment layered over the test environment, where a test installs a pytest plugin
as `pip install` would (a module and a distribution whose entry point pytest loads), without
touching the environment the other tests share.

Each layer holds a `.pth` that adds the test environment's site-packages (its own `.pth` files
included, the editable install of pytest-ditar among them), a `dit-ar` script on its own
interpreter, and whatever `install_plugin` puts there. Put `bin` first on PATH and every `dit-ar`
and `python -m pytest` the test starts runs in the layer."""
from __future__ import annotations

import subprocess
import sys
import sysconfig
from pathlib import Path

PLUGIN_ENTRY_GROUP = "pytest11"


def layered_venv(where: Path) -> Path:
    """A new environment at `where` over this one; returns its `bin` folder."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True)
    site = site_packages(where)
    parent = sysconfig.get_paths()["purelib"]
    (site / "_ditar_tests_parent.pth").write_text(f"import site; site.addsitedir({parent!r})\n")
    exe = where / "bin" / "python"
    script = where / "bin" / "dit-ar"
    script.write_text(f"#!{exe}\nimport sys\nfrom pytest_ditar.cli.main import main\nsys.exit(main())\n")
    script.chmod(0o755)
    return where / "bin"


def site_packages(where: Path) -> Path:
    (site,) = (where / "lib").glob("python3*/site-packages")
    return site


def install_plugin(site: Path, module: str, source: str) -> Path:
    """`module` as a distribution installed in the site-packages folder `site`, with a pytest11
    entry point; returns the module's file."""
    dist = site / f"{module}-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module}\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(f"[{PLUGIN_ENTRY_GROUP}]\n{module} = {module}\n")
    (dist / "RECORD").write_text(f"{module}.py,,\n{dist.name}/METADATA,,\n{dist.name}/entry_points.txt,,\n"
                                 f"{dist.name}/RECORD,,\n")
    path = site / f"{module}.py"
    path.write_text(source)
    return path
