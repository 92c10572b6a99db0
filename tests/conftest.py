import sys
from pathlib import Path

# Tests import the project's packages (settings, components, routing) from the repository root.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

E2E_DIR = Path(__file__).resolve().parent / "e2e"


def pytest_collection_modifyitems(items):
    # Everything under tests/e2e runs real vLLM servers: `./test.sh --unit` deselects it by this mark.
    import pytest

    for item in items:
        if E2E_DIR in Path(item.fspath).resolve().parents:
            item.add_marker(pytest.mark.e2e)
