"""The one compiled module, the consumer's record decoding; everything else is in
pyproject.toml. Optional: where it cannot be built, broker.records.record decodes in Python."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "broker.records._records",
            ["broker/records/_records.c"],
            optional=True,
            extra_compile_args=["-O2"],
        )
    ]
)
