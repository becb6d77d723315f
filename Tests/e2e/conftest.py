import os
import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from tessera_harness import SOFTHSM_MODULE, Daemon, SoftHSM  # noqa: E402


@pytest.fixture
def softhsm(tmp_path: pathlib.Path) -> SoftHSM:
    hsm = SoftHSM(tmp_path)
    hsm.add_token("tessera-test", pin="1234")
    return hsm


@pytest.fixture
def daemon(tmp_path: pathlib.Path, softhsm: SoftHSM):
    d = Daemon(tmp_path, softhsm.env, ["--pkcs11-module", SOFTHSM_MODULE, "--no-embedded-softhsm"]).start()
    yield d
    d.stop()
