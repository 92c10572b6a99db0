"""Compiles the simulator's core (routing/compiled.py says which modules, and why) with Cython,
in place, and records the digest of each source it compiled from.

    .venv/bin/python .ci/build_core.py      (./test.sh and ./demo.sh run it after installing .venv)

Only what changed is compiled again. A failure leaves the pure-Python modules to run (slower,
the same predictions) and says so; it does not fail the set-up.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
# The build reads the modules' sources and the manifest; it must not load a build of them.
os.environ["ROUTING_PURE_PYTHON"] = "1"

from routing.compiled import (COMPILED_MODULES, MANIFEST, NATIVE_MODULES, source_digest, source_files,  # noqa: E402
                              stale_modules)

# Cython directives for every module: annotations document, the .pxd files type (a `x: int`
# annotation would otherwise make x a Python int object).
DIRECTIVES = {"language_level": 3, "annotation_typing": False, "binding": False, "embedsignature": False}


def build() -> list[str]:
    from Cython.Build import cythonize
    from setuptools import Extension
    from setuptools.dist import Distribution

    # Cython compiles again what is newer than its C file; a source whose digest differs from the
    # one last compiled (a checkout that kept an old time, say) is compiled again all the same.
    for module in stale_modules():
        source_files(module)[0].with_suffix(".c").unlink(missing_ok=True)
    extensions = [Extension(module, [str(source_files(module)[0].relative_to(ROOT))])
                  for module in (*COMPILED_MODULES, *NATIVE_MODULES)]
    modules = cythonize(extensions, compiler_directives=DIRECTIVES, nthreads=os.cpu_count() or 1, quiet=True)
    distribution = Distribution({"ext_modules": modules, "script_args": [
        "--quiet", "build_ext", "--inplace", "--parallel", str(os.cpu_count() or 1), "--build-temp", "build/core"]})
    distribution.parse_command_line()
    distribution.run_commands()
    return [module.name for module in modules]


def main() -> int:
    started = time.monotonic()
    os.chdir(ROOT)
    try:
        built = build()  # Cython's and the compiler's errors, if any, go to stderr as they come
    except (Exception, SystemExit) as error:  # any build failure: the pure-Python modules still run
        MANIFEST.unlink(missing_ok=True)
        print(f"build_core: the compiled core was not built ({error!r}); predict runs the pure-Python modules, "
              "with the same results, a few times slower", file=sys.stderr)
        return 0
    MANIFEST.write_text(json.dumps({"modules": {module: source_digest(module) for module in built}}, indent=1) + "\n",
                        encoding="utf-8")
    print(f"build_core: {len(built)} modules compiled or current in {time.monotonic() - started:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
