"""The parts of the build pyproject.toml cannot state: the C decoder of
tf.train.Example (optional: without a compiler or numpy's headers the
package installs with its pure-Python decoder)."""

from setuptools import Extension, setup


def _extensions():
    try:
        import numpy
    except ImportError:
        return []
    return [Extension("corgifs._example", ["corgifs/_example.c"], include_dirs=[numpy.get_include()],
                      extra_compile_args=["-O2"], optional=True)]


setup(ext_modules=_extensions())
