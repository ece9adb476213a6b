from __future__ import annotations

from pathlib import Path

import bcrypt
import pytest

from tests.web.certs import Certs, make_certs

PASSWORD = "correct horse battery staple"


@pytest.fixture(scope="session")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="session")
def password_hash() -> str:
    # Cost 4 keeps the test fast; the exporter accepts any bcrypt cost.
    return bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(rounds=4)).decode()


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    return tmp_path
