"""pip install --no-build-isolation ./python: the shoal package, its C module built by the
project's own CMake build (the library and the module in one go, as `make` does), with
Debian's setuptools, offline."""
import os
import re
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(HERE)
MODULE_TARGET = "shoal_pymod"


def version():
    with open(os.path.join(SRC, "CMakeLists.txt")) as f:
        return re.search(r"project\(shoal VERSION ([0-9.]+)", f.read()).group(1)


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        build = os.path.abspath(os.path.join(self.build_temp, "cmake"))
        subprocess.check_call(["cmake", "-S", SRC, "-B", build, "-DCMAKE_BUILD_TYPE=Release",
                               "-DBUILD_TESTING=OFF",
                               "-DPython3_EXECUTABLE=" + sys.executable])
        subprocess.check_call(["cmake", "--build", build, "--target", MODULE_TARGET,
                               "-j%d" % (os.cpu_count() or 2)])
        built = os.path.join(build, "python", "shoal", os.path.basename(self.get_ext_filename(ext.name)))
        dest = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        shutil.copyfile(built, dest)


setup(
    name="shoal",
    version=version(),
    description="A shared-memory object store many processes read without copying, "
                "over libshoal",
    packages=["shoal"],
    package_data={"shoal": ["py.typed", "*.pyi"]},
    ext_modules=[Extension("shoal._shoal", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    python_requires=">=3.11",
    zip_safe=False,
)
