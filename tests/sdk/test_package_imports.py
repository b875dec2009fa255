"""``import sdk`` is lazy: the broker, which needs only the sans-IO core, loads no client code."""

from __future__ import annotations

import subprocess
import sys

import sdk

CLIENT_PACKAGES = ("sdk.producer", "sdk.client", "sdk.sync", "sdk.consumer")


def _loaded_after(code: str) -> list[str]:
    script = (
        f"{code}\nimport sys\nprint(' '.join(m for m in sys.modules if m.startswith({CLIENT_PACKAGES!r})))"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    return result.stdout.split()


def test_importing_the_broker_loads_no_client_code():
    assert _loaded_after("import reference_broker") == []
    # Everything the broker process imports at startup (python -m reference_broker).
    startup = (
        "import pkgutil, importlib, reference_broker\n"
        "for info in pkgutil.walk_packages(reference_broker.__path__, 'reference_broker.'):\n"
        "    if info.name not in ('reference_broker.testing', 'reference_broker.pytest_plugin'):\n"
        "        importlib.import_module(info.name)\n"
        "import reference_broker.__main__ as cli\n"
        "cli.parse_args(['--data-dir', '/tmp/unused'])"
    )
    assert _loaded_after(startup) == []


def test_every_public_name_resolves_lazily():
    assert _loaded_after("import sdk") == []
    for name in sdk.__all__:
        assert getattr(sdk, name) is not None, name
    assert sdk.AIOKafkaProducer is sdk.Producer
    assert sdk.AIOKafkaConsumer is sdk.Consumer
    assert set(dir(sdk)) >= set(sdk.__all__)
