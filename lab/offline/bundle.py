"""Build the offline bundle for an air-gapped GPU node: the lab's locked environment (uv.lock)
plus SGLang's serving set (``sglang-<version>.toml``), as parts of at most ``part_mib`` MiB.

``lab bundle --out dist/node`` (:func:`build_bundle`) runs here, where PyPI is reachable:

1. the lab's closure from ``uv.lock`` for the node's interpreter (:func:`lab.offline.lockfile.lock_closure`,
   CPython 3.12 on Linux x86-64 by default), less ``omit`` (default ``jupyterlab``: a headless
   node runs ``dvc repro``, not the notebook UI) and less what the node already has
   (``node_packages``: ``pip list --format=freeze`` of the node; same version = left out);
2. SGLang's set: the spec's pins (exact files, SHA-256 checked) and its ``from_lab_lock`` names
   at uv.lock's versions, so one version of each travels; a pin wins over the lab lock for the
   node (e.g. tokenizers 0.22.2 for transformers 5.12.1), and the build says so;
3. every file fetched by ``pip download --require-hashes`` (wheels for the node's platform; an
   sdist-only package is built into a pure-Python wheel with ``pip wheel``), then unpacked one
   distribution per archive (``.tar.xz``), with the spec's trims (fa3's 1.1 GB library) and the
   import-time stand-ins (``standins/``);
4. the archives packed into parts (plain ``.tar`` of ``.tar.xz`` members, first-fit decreasing),
   the SGLang set first: each part installs on its own, so a node reached through a 64 MiB
   transfer limit takes the bundle in several copies. ``bundle.json`` lists parts, SHA-256,
   distributions, what was left out and why, the environment and the flags a launch needs.

:mod:`lab.offline.install` installs it on the node with the standard library alone.
"""

from __future__ import annotations

import fnmatch
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

from lab.offline.install import sha256_file
from lab.offline.lockfile import LockedDist, LockError, lock_closure, normalize, target_env

__all__ = ["BundleError", "SglangSpec", "load_spec", "plan_bundle", "build_bundle", "pack_parts",
           "SPEC_DIR", "DEFAULT_OMIT", "DEFAULT_PART_MIB", "MANIFEST"]

SPEC_DIR = Path(__file__).parent
STANDINS = SPEC_DIR / "standins"
#: Left out of a node bundle by default: the notebook UI and what only it needs (31 packages).
DEFAULT_OMIT = ("jupyterlab",)
#: Part size: under the 64 MiB a call to the lent GPU machine carries, with room for the repo.
DEFAULT_PART_MIB = 56.0
MANIFEST = "bundle.json"
#: manylinux tags pip may pick for an x86-64 node (glibc 2.34 covers the 0.5.16 wheel).
PLATFORMS = ("manylinux_2_34_x86_64", "manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_24_x86_64",
             "manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux_2_5_x86_64", "manylinux1_x86_64", "linux_x86_64")


class BundleError(RuntimeError):
    """The bundle cannot be built; the message names the cause and the fix."""


@dataclass(frozen=True)
class SglangSpec:
    """``sglang-<version>.toml``: SGLang's serving set for a node that has PyTorch.

    :ivar pins: exact distributions (name, version, SHA-256 of the wheel).
    :ivar from_lab_lock: names taken from uv.lock at its versions.
    :ivar env: variables every launch from the bundle needs.
    :ivar requires_flags: flag -> allowed values a launch must carry.
    :ivar trim: distribution -> glob patterns of files left out.
    """

    version: str
    python: str
    pins: tuple[LockedDist, ...]
    from_lab_lock: tuple[str, ...]
    node_needs: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    requires_flags: dict[str, list[str]] = field(default_factory=dict)
    trim: dict[str, list[str]] = field(default_factory=dict)


def load_spec(version: str = "0.5.16") -> SglangSpec:
    """Read ``lab/offline/sglang-<version>.toml``.

    :raises BundleError: no spec for that version (the message lists the ones there are).
    """
    path = SPEC_DIR / f"sglang-{version}.toml"
    if not path.exists():
        have = sorted(p.stem.removeprefix("sglang-") for p in SPEC_DIR.glob("sglang-*.toml"))
        raise BundleError(f"no SGLang serving set for {version} ({path} missing). Fix: use one of {have}")
    raw = tomllib.loads(path.read_text())["sglang"]
    pins = tuple(LockedDist(normalize(p["name"]), p["version"], (f"sha256:{p['sha256']}",)) for p in raw.get("pin", []))
    return SglangSpec(version=raw["version"], python=raw.get("python", "3.12"), pins=pins,
                      from_lab_lock=tuple(normalize(n) for n in raw.get("from_lab_lock", [])),
                      node_needs=tuple(raw.get("node_needs", [])), env=dict(raw.get("env", {})),
                      requires_flags=dict(raw.get("requires_flags", {})),
                      trim={normalize(k): list(v) for k, v in raw.get("trim", {}).items()})


def read_node_packages(path: str | os.PathLike[str] | None) -> dict[str, str | None]:
    """Distributions the node already has: ``pip list --format=freeze`` lines (``name==version``);
    a bare name means "present, version unknown" (it is then left out whatever its version).

    :returns: normalized name -> version (None when unknown).
    :raises BundleError: the file cannot be read.
    """
    if path is None:
        return {}
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise BundleError(f"cannot read node package list {path}: {exc}. Fix: on the node run "
                          "`python3 -m pip list --format=freeze > node-packages.txt` and copy it here") from exc
    out: dict[str, str | None] = {}
    for line in text.splitlines():
        line = line.split("#")[0].strip()
        if not line:
            continue
        name, _, ver = line.partition("==")
        out[normalize(name.split(" @ ")[0].strip())] = ver.strip() or None
    return out


@dataclass
class BundlePlan:
    """What travels and what does not.

    :ivar sglang: distributions of the SGLang group (pins + shared needs).
    :ivar lab: the rest of the lab's closure.
    :ivar left_out: ``{name, version, reason}`` rows (omitted, on the node already).
    :ivar notes: pin-over-lock decisions and other lines the build prints.
    """

    spec: SglangSpec
    sglang: list[LockedDist]
    lab: list[LockedDist]
    left_out: list[dict]
    notes: list[str]


def plan_bundle(lock_path: str | os.PathLike[str], spec: SglangSpec, *, omit: tuple[str, ...] = DEFAULT_OMIT,
                node_packages: dict[str, str | None] | None = None) -> BundlePlan:
    """Decide the two groups (no download).

    :raises BundleError: a ``from_lab_lock`` name is not in the lab's closure.
    """
    try:
        lab = {d.name: d for d in lock_closure(lock_path, env=target_env(spec.python), omit=omit)}
        full = {d.name: d for d in lock_closure(lock_path, env=target_env(spec.python))}
    except LockError as exc:
        raise BundleError(str(exc)) from exc
    node = node_packages or {}
    notes: list[str] = []
    left_out = [{"name": n, "version": d.version, "reason": f"omitted ({', '.join(omit)} and what only it needs)"}
                for n, d in sorted(full.items()) if n not in lab]
    sg: dict[str, LockedDist] = {}
    for pin in spec.pins:
        sg[pin.name] = pin
        if pin.name in lab and lab[pin.name].version != pin.version:
            notes.append(f"{pin.name}: uv.lock has {lab[pin.name].version}, SGLang {spec.version} pins "
                         f"{pin.version}: the node gets {pin.version}")
        lab.pop(pin.name, None)
    for name in spec.from_lab_lock:
        if name in sg:
            continue
        d = lab.pop(name, None) or full.get(name)
        if d is None:
            raise BundleError(f"sglang-{spec.version}.toml takes {name} from uv.lock, which does not hold it. "
                              f"Fix: pin it in the spec ([[sglang.pin]] with version and sha256)")
        sg[name] = d
    for name in sorted(lab):
        have = node.get(name, "") if name in node else ""
        if name in node and (have is None or have == lab[name].version):
            left_out.append({"name": name, "version": lab[name].version,
                             "reason": "on the node already" + (f" ({have})" if have else " (version not given)")})
            del lab[name]
    return BundlePlan(spec, sorted(sg.values(), key=lambda d: d.name), sorted(lab.values(), key=lambda d: d.name),
                      left_out, notes)


# --------------------------------------------------------------------------- download


def _pip() -> list[str]:
    """A pip that can download: this interpreter's, else the bootstrap venv's or python3's."""
    cands = [[sys.executable, "-m", "pip"], [str(Path(".cache/uv/bin/python")), "-m", "pip"],
             [shutil.which("python3") or "python3", "-m", "pip"]]
    for c in cands:
        try:
            if subprocess.run(c + ["--version"], capture_output=True, timeout=60).returncode == 0:
                return c
        except (OSError, subprocess.TimeoutExpired):
            continue
    raise BundleError("no pip found to download wheels. Fix: run README's first command (it makes .cache/uv "
                      "with pip), or `python3 -m ensurepip`")


def _download(dists: list[LockedDist], wheels: Path, python: str) -> None:
    """Fetch every distribution's file into ``wheels`` (hash-checked by pip)."""
    wheels.mkdir(parents=True, exist_ok=True)
    pip = _pip()
    binary = [d for d in dists if d.has_wheels]
    source = [d for d in dists if not d.has_wheels]
    req = wheels / "requirements.txt"
    req.write_text("\n".join(d.requirement() for d in binary) + "\n")
    plat = [a for p in PLATFORMS for a in ("--platform", p)]
    cmd = pip + ["download", "--no-deps", "--only-binary=:all:", "--python-version", python, "--implementation", "cp",
                 *plat, "--require-hashes", "-r", str(req), "-d", str(wheels), "-q"]
    if subprocess.run(cmd).returncode != 0:
        raise BundleError(f"pip download failed (see above). Fix: check the network to PyPI; the list is {req}")
    for d in source:
        if any(wheels.glob(f"{d.name.replace('-', '_')}-{d.version}-*.whl")):
            continue
        sreq = wheels / f"sdist-{d.name}.txt"
        sreq.write_text(d.requirement() + "\n")
        if subprocess.run(pip + ["wheel", "--no-deps", "--require-hashes", "-r", str(sreq), "-w", str(wheels), "-q"]).returncode:
            raise BundleError(f"cannot build a wheel for {d.name}=={d.version} (sdist only). Fix: see pip's output above")
        built = list(wheels.glob(f"{d.name.replace('-', '_')}-{d.version}-*.whl"))
        if not built or not built[0].name.endswith("-py3-none-any.whl"):
            raise BundleError(f"{d.name}=={d.version} built as {built}: not pure Python, so it will not run on "
                              "the node. Fix: build it on a machine like the node")


def _wheel_for(d: LockedDist, wheels: Path) -> Path:
    stem = d.name.replace("-", "_")
    for cand in sorted(wheels.glob("*.whl")):
        n, _, rest = cand.name.partition("-")
        if normalize(n) == d.name and rest.split("-")[0] == d.version:
            return cand
    raise BundleError(f"no wheel for {d.name}=={d.version} in {wheels} ({stem}-{d.version}-*.whl). Fix: rerun the build")


# --------------------------------------------------------------------------- unpack + pack


def _unpack(wheel: Path, trims: list[str]) -> tuple[bytes, list[str], int]:
    """One wheel as a ``.tar.xz`` of its site-packages content (``.data/purelib|platlib`` folded
    in, ``.data/scripts`` under ``bin/``), less files matching ``trims``.

    :returns: (the archive's bytes, the trimmed paths, unpacked bytes).
    """
    buf = io.BytesIO()
    trimmed: list[str] = []
    size = 0
    with zipfile.ZipFile(wheel) as zf, tarfile.open(fileobj=buf, mode="w:xz", preset=6) as tf:
        for info in zf.infolist():
            if info.is_dir():
                continue
            name = info.filename
            parts = name.split("/")
            if parts[0].endswith(".data") and len(parts) > 2:
                kind, rest = parts[1], "/".join(parts[2:])
                if kind in ("purelib", "platlib"):
                    name = rest
                elif kind == "scripts":
                    name = "bin/" + rest
                else:
                    continue  # headers / data: not needed to import or run
            if any(fnmatch.fnmatch(name, pat) for pat in trims):
                trimmed.append(name)
                continue
            data = zf.read(info)
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            ti.mode = 0o755 if (info.external_attr >> 16) & 0o111 or name.startswith("bin/") else 0o644
            ti.mtime = 0
            tf.addfile(ti, io.BytesIO(data))
            size += len(data)
    return buf.getvalue(), trimmed, size


def _standins_archive() -> tuple[bytes, int]:
    buf = io.BytesIO()
    size = 0
    with tarfile.open(fileobj=buf, mode="w:xz", preset=6) as tf:
        for f in sorted(STANDINS.rglob("*.py")):
            data = f.read_bytes()
            ti = tarfile.TarInfo(str(f.relative_to(STANDINS)))
            ti.size, ti.mtime, ti.mode = len(data), 0, 0o644
            tf.addfile(ti, io.BytesIO(data))
            size += len(data)
    return buf.getvalue(), size


def pack_parts(members: list[tuple[str, str, int]], limit_bytes: int) -> list[list[tuple[str, str, int]]]:
    """First-fit decreasing bin packing of ``(group, file, bytes)`` members into parts of at most
    ``limit_bytes``, one group at a time (the order given), so a group's parts come first.

    :raises BundleError: one member alone is larger than the limit.
    """
    parts: list[list[tuple[str, str, int]]] = []
    for group in dict.fromkeys(g for g, _, _ in members):
        bins: list[list[tuple[str, str, int]]] = []
        for m in sorted((m for m in members if m[0] == group), key=lambda m: -m[2]):
            if m[2] > limit_bytes:
                raise BundleError(f"{m[1]} is {m[2] / 2**20:.1f} MiB, over the part size "
                                  f"{limit_bytes / 2**20:.1f} MiB. Fix: raise --part-mib")
            for b in bins:
                if sum(x[2] for x in b) + m[2] <= limit_bytes:
                    b.append(m)
                    break
            else:
                bins.append([m])
        parts += bins
    return parts


def build_bundle(out: str | os.PathLike[str], *, lock_path: str | os.PathLike[str] = "uv.lock",
                 sglang_version: str = "0.5.16", omit: tuple[str, ...] = DEFAULT_OMIT,
                 node_packages: str | os.PathLike[str] | None = None, part_mib: float = DEFAULT_PART_MIB,
                 wheel_cache: str | os.PathLike[str] = ".cache/offline/wheels", log=print) -> dict:
    """Build the bundle into ``out`` (emptied first) and return its manifest (``bundle.json``).

    :param part_mib: the largest part, MiB (default 56: a 64 MiB transfer with the repo beside it).
    :raises BundleError: with the cause and the fix (no pip, a download or hash failure, a
        distribution over the part size, a name the lock lacks).
    """
    spec = load_spec(sglang_version)
    plan = plan_bundle(lock_path, spec, omit=omit, node_packages=read_node_packages(node_packages))
    for n in plan.notes:
        log(f"[bundle] {n}")
    wheels = Path(wheel_cache)
    _download(plan.sglang + plan.lab, wheels, spec.python)
    out = Path(out)
    if out.exists():
        shutil.rmtree(out)
    (out / "members").mkdir(parents=True)
    jobs = [("sglang", d) for d in plan.sglang] + [("lab", d) for d in plan.lab]
    dists: dict[str, dict] = {}

    def one(job: tuple[str, LockedDist]) -> tuple[str, str, int]:
        group, d = job
        data, trimmed, size = _unpack(_wheel_for(d, wheels), spec.trim.get(d.name, []))
        fname = f"{d.name}-{d.version}.tar.xz"
        (out / "members" / fname).write_bytes(data)
        dists[fname] = {"name": d.name, "version": d.version, "group": group, "unpacked_bytes": size,
                        "trimmed": trimmed}
        return group, fname, len(data)

    with ThreadPoolExecutor(max_workers=max(1, min(4, os.cpu_count() or 1))) as pool:
        members = list(pool.map(one, jobs))
    data, size = _standins_archive()
    (out / "members" / "lab-standins.tar.xz").write_bytes(data)
    dists["lab-standins.tar.xz"] = {"name": "lab-standins", "version": "0", "group": "sglang", "unpacked_bytes": size,
                                    "trimmed": [], "modules": sorted(p.name for p in STANDINS.iterdir() if p.is_dir())}
    members.append(("sglang", "lab-standins.tar.xz", len(data)))
    parts = []
    for i, group_members in enumerate(pack_parts(members, int(part_mib * 2**20))):
        group = group_members[0][0]
        name = f"part-{i + 1:02d}-{group}.tar"
        with tarfile.open(out / name, "w") as tf:
            for _, fname, _ in sorted(group_members, key=lambda m: m[1]):
                tf.add(out / "members" / fname, arcname=fname)
        parts.append({"file": name, "group": group, "bytes": (out / name).stat().st_size,
                      "sha256": sha256_file(out / name), "members": sorted(m[1] for m in group_members)})
    shutil.rmtree(out / "members")
    manifest = {
        "format": 1, "python": spec.python, "platform": "linux_x86_64",
        "sglang": {"version": spec.version, "node_needs": list(spec.node_needs), "env": spec.env,
                   "requires_flags": spec.requires_flags, "trim": spec.trim},
        "lock": {"file": str(lock_path), "sha256": sha256_file(Path(lock_path)), "omit": list(omit)},
        "node_packages": str(node_packages) if node_packages else None,
        "parts": parts, "dists": dists, "left_out": plan.left_out, "notes": plan.notes,
    }
    (out / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    total = sum(p["bytes"] for p in parts)
    log(f"[bundle] {len(dists)} distributions in {len(parts)} parts, {total / 2**20:.1f} MiB in all -> {out}")
    for p in parts:
        log(f"[bundle]   {p['file']}: {p['bytes'] / 2**20:.1f} MiB, {len(p['members'])} distributions")
    log(f"[bundle] left out: {len(plan.left_out)} (see {out / MANIFEST}); install on the node with "
        f"`python3 -m lab.offline.install {out}`")
    return manifest


def plan_dict(plan: BundlePlan) -> dict:
    """The plan as plain data (for ``lab bundle --dry-run``)."""
    return {"sglang": [asdict(d) for d in plan.sglang], "lab": [asdict(d) for d in plan.lab],
            "left_out": plan.left_out, "notes": plan.notes}
