"""setuptools glue for `pip install .` (see pyproject.toml): build_py runs the CMake build
of the extension and copies it beside python/dlc/*.py; the distribution is marked as
binary so the wheel carries the platform's tag."""
import glob
import os
import shutil
import subprocess

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

ROOT = os.path.dirname(os.path.abspath(__file__))
os.makedirs(os.path.join(ROOT, "build", "setuptools"), exist_ok=True)  # setup.cfg's egg_base


class BuildWithCMake(build_py):
    def run(self):
        super().run()
        build = os.environ.get("DLC_BUILD_DIR", os.path.join(ROOT, "build"))
        env = dict(os.environ, DLC_BUILD_DIR=build)
        subprocess.run([os.path.join(ROOT, "scripts", "build.sh")], check=True, env=env)
        built = glob.glob(os.path.join(build, "python", "dlc", "_dlc*.so"))
        if len(built) != 1:
            raise RuntimeError("the CMake build made no dlc extension in %s/python/dlc (is pybind11-dev "
                               "installed?)" % build)
        target = os.path.join(self.build_lib, "dlc")
        os.makedirs(target, exist_ok=True)
        shutil.copy2(built[0], target)


class BinaryDistribution(Distribution):
    def has_ext_modules(self):
        return True


setup(cmdclass={"build_py": BuildWithCMake}, distclass=BinaryDistribution)
