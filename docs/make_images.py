"""The documentation's images, made by running livens (``python docs/make_images.py``).

- ``images/heavy-top_EM.png``: the overview figure of ``livens run heavy-top --scheme EM --tol roundoff``, the
  README's figure.
"""

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> int:
    (HERE / "images").mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory() as out:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "livens.cli",
                "run",
                "heavy-top",
                "--scheme",
                "EM",
                "--tol",
                "roundoff",
                "--out",
                out,
                "--quiet",
            ],
            check=True,
        )
        shutil.copy(Path(out) / "heavy-top_EM.png", HERE / "images" / "heavy-top_EM.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
