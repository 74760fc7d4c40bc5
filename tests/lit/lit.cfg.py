# lit configuration for dlc: FileCheck tests over `dlc` subcommands.
import os
import lit.formats

config.name = "dlc"
config.test_format = lit.formats.ShTest(execute_external=True)
config.suffixes = [".ir", ".test"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(os.path.dirname(config.dlc_tools_dir), "tests", "lit-out")
config.excludes = ["Inputs", "lit.cfg.py", "lit.site.cfg.py.in", "make_bad_models.py"]

config.substitutions.append(("%dlc", os.path.join(config.dlc_tools_dir, "dlc")))
config.substitutions.append(("%python", config.python))
config.substitutions.append(("%src", config.dlc_src_root))
config.environment["PATH"] = os.pathsep.join(
    [config.dlc_tools_dir, config.llvm_tools_dir, config.environment.get("PATH", os.environ["PATH"])])

# Tests of what dlc does without a GPU (dlc tune's refusal) run where there is none.
if not os.path.exists("/dev/nvidiactl"):
    config.available_features.add("no-gpu")
