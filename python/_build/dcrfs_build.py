# SPDX-License-Identifier: MIT
"""dcrfs_build - the PEP 517 build backend of python/ (pyproject.toml),
in the tree and stdlib-only, so that ``pip install ./python`` works
offline in any environment with pip (Python >= 3.9), with or without
--no-build-isolation: it needs neither setuptools nor wheel, which a
venv of Python 3.12 and later does not have and which older setuptools
needs as a separate package.

It builds one pure-Python wheel (py3-none-any) of the package dcrfs/
(every .py of it but _paths.py, which `make install` writes for its own
copy), an editable wheel (a .pth naming this directory), and an sdist.
The name and version are pyproject.toml's [project] ones.
"""
import base64
import hashlib
import io
import os
import re
import tarfile
import zipfile

_HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_PKG = "dcrfs"
_SKIP = {"_paths.py"}
_EPOCH = (1980, 1, 1, 0, 0, 0)  # zip's first date: same input, same bytes


def _project():
    """(name, version, summary, requires_python) from pyproject.toml."""
    with open(os.path.join(_HERE, "pyproject.toml"), encoding="utf-8") as f:
        text = f.read()
    proj = text.split("[project]", 1)[1].split("\n[", 1)[0]

    def get(key):
        m = re.search(r'^%s\s*=\s*"([^"]*)"' % key, proj, re.M)
        if not m:
            raise RuntimeError("pyproject.toml: [project] has no %s" % key)
        return m.group(1)
    return get("name"), get("version"), get("description"), get("requires-python")


def _metadata():
    name, version, summary, req = _project()
    with open(os.path.join(_HERE, "README.txt"), encoding="utf-8") as f:
        readme = f.read()
    return ("Metadata-Version: 2.1\nName: %s\nVersion: %s\nSummary: %s\n"
            "License: MIT\nRequires-Python: %s\n"
            "Description-Content-Type: text/plain\n\n%s" % (name, version, summary, req, readme))


def _sources():
    d = os.path.join(_HERE, _PKG)
    return sorted(f for f in os.listdir(d) if f.endswith(".py") and f not in _SKIP)


def _write_wheel(wheel_directory, files):
    """files: [(archive name, bytes)]; adds the dist-info and RECORD."""
    name, version, _, _ = _project()
    dist = "%s-%s.dist-info" % (name, version)
    files = list(files) + [
        (dist + "/METADATA", _metadata().encode("utf-8")),
        (dist + "/WHEEL", b"Wheel-Version: 1.0\nGenerator: dcrfs_build\n"
                          b"Root-Is-Purelib: true\nTag: py3-none-any\n"),
    ]
    record = io.StringIO()
    for arc, data in files:
        h = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
        record.write("%s,sha256=%s,%d\n" % (arc, h.decode(), len(data)))
    record.write("%s/RECORD,,\n" % dist)
    files.append((dist + "/RECORD", record.getvalue().encode("utf-8")))
    whl = "%s-%s-py3-none-any.whl" % (name, version)
    with zipfile.ZipFile(os.path.join(wheel_directory, whl), "w", zipfile.ZIP_DEFLATED) as z:
        for arc, data in files:
            zi = zipfile.ZipInfo(arc, _EPOCH)
            zi.external_attr = 0o644 << 16
            zi.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(zi, data)
    return whl


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    files = []
    for f in _sources():
        with open(os.path.join(_HERE, _PKG, f), "rb") as fh:
            files.append(("%s/%s" % (_PKG, f), fh.read()))
    return _write_wheel(wheel_directory, files)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    return _write_wheel(wheel_directory, [("%s.pth" % _PKG, (_HERE + "\n").encode())])


def build_sdist(sdist_directory, config_settings=None):
    name, version, _, _ = _project()
    base = "%s-%s" % (name, version)
    out = os.path.join(sdist_directory, base + ".tar.gz")
    members = ["pyproject.toml", "README.txt", "_build/dcrfs_build.py"] + \
        ["%s/%s" % (_PKG, f) for f in _sources()]
    with tarfile.open(out, "w:gz") as t:
        for m in members:
            t.add(os.path.join(_HERE, m), arcname="%s/%s" % (base, m))
        pkg_info = _metadata().encode("utf-8")
        ti = tarfile.TarInfo("%s/PKG-INFO" % base)
        ti.size = len(pkg_info)
        t.addfile(ti, io.BytesIO(pkg_info))
    return base + ".tar.gz"
