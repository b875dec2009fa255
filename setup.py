"""The C extensions; everything else about the distribution is in pyproject.toml.

Each is a C version of a hot loop of ``sdk.records`` with a pure-Python twin that the tests hold
to the same bytes and errors. They are ``optional``: where no C compiler is found, the build goes
on without them and the package uses the twins (``TOPICWRIGHT_PURE_PYTHON=1`` selects the twins
where the extensions are built).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension("sdk.records._reader", ["sdk/records/_reader.c"], optional=True),
        Extension("sdk.records._writer", ["sdk/records/_writer.c"], optional=True),
    ]
)
