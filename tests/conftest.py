import sys
from pathlib import Path

# Tests import the project's packages (settings, components, routing) from the repository root.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

E2E_DIR = Path(__file__).resolve().parent / "e2e"
# Run after every other test: in the fresh-clone CI run of 2026-12-07 some thread outlived it, and
# tests/routing/test_parallel.py, which needs a process with one thread to fork, then failed.
RUN_LAST = "test_scale_out_on_real_vllm.py"


def pytest_collection_modifyitems(items):
    # Everything under tests/e2e runs real vLLM servers: `./test.sh --unit` deselects it by this mark.
    import pytest

    for item in items:
        if E2E_DIR in Path(item.fspath).resolve().parents:
            item.add_marker(pytest.mark.e2e)
    items.sort(key=lambda item: Path(item.fspath).name == RUN_LAST)
