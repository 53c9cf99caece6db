"""Unpacking an archive source: every member's path obeys the path grammar and stays
in the workspace, links and special files are refused, and the inflated size and the
member count are bounded."""

from __future__ import annotations

import posixpath
import stat
import tarfile
import zipfile
from pathlib import Path

from sandbox.workspace.sources import WorkspaceSourceError, check_name

MAX_ARCHIVE_BYTES = 2_000_000_000
MAX_ARCHIVE_MEMBERS = 200_000


def _archive_member_path(name: str) -> str:
    clean = name[2:] if name.startswith("./") else name
    clean = clean.rstrip("/")
    check_name(clean)
    if not clean or clean.startswith("/") or "\\" in clean or "\x00" in clean:
        raise WorkspaceSourceError(f"archive member {name!r}: absolute or malformed path")
    if any(part == ".." for part in clean.split("/")):
        raise WorkspaceSourceError(f"archive member {name!r}: '..' would leave the workspace")
    return posixpath.normpath(clean)


def extract_archive(location: Path, dest: Path) -> None:
    if not location.is_file():
        raise WorkspaceSourceError(f"{location} is not a file")
    name = location.name.lower()
    dest.mkdir()
    if name.endswith(".zip"):
        _extract_zip(location, dest)
    elif name.endswith((".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tar.xz")):
        _extract_tar(location, dest)
    else:
        raise WorkspaceSourceError(f"{location.name}: archives must be .zip, .tar, .tar.gz, .tgz, .tar.bz2 or .tar.xz")


def _extract_tar(location: Path, dest: Path) -> None:
    try:
        archive = tarfile.open(location, "r:*")  # noqa: SIM115 - opened apart to tell a bad archive from a bad member
    except (tarfile.TarError, OSError) as exc:
        raise WorkspaceSourceError(f"{location.name}: not a readable tar archive ({exc})") from None
    with archive:
        members: list[tarfile.TarInfo] = []
        total = 0
        for member in archive:
            path = _archive_member_path(member.name)
            if path == "." or path == ".git" or path.startswith(".git/"):
                continue
            if member.islnk():
                raise WorkspaceSourceError(f"archive member {member.name!r}: hard links are refused")
            if member.issym():
                target = member.linkname
                joined = posixpath.normpath(posixpath.join(posixpath.dirname(path), target))
                if target.startswith("/") or joined == ".." or joined.startswith("../"):
                    raise WorkspaceSourceError(f"archive member {member.name!r}: symlink to {target!r} leaves the workspace")
            elif not (member.isfile() or member.isdir()):
                raise WorkspaceSourceError(f"archive member {member.name!r}: devices and FIFOs are refused")
            total += member.size
            if total > MAX_ARCHIVE_BYTES or len(members) >= MAX_ARCHIVE_MEMBERS:
                raise WorkspaceSourceError(f"{location.name}: larger than {MAX_ARCHIVE_BYTES} bytes or {MAX_ARCHIVE_MEMBERS} members")
            members.append(member)
        try:
            # The "data" filter re-checks every member (and drops setuid bits) on
            # top of the checks above.
            archive.extractall(dest, members=members, filter="data")
        except (tarfile.TarError, OSError) as exc:
            raise WorkspaceSourceError(f"{location.name}: refused while extracting ({exc})") from None


def _extract_zip(location: Path, dest: Path) -> None:
    try:
        archive = zipfile.ZipFile(location)
    except (zipfile.BadZipFile, OSError) as exc:
        raise WorkspaceSourceError(f"{location.name}: not a readable zip archive ({exc})") from None
    with archive:
        infos = archive.infolist()
        if len(infos) > MAX_ARCHIVE_MEMBERS or sum(i.file_size for i in infos) > MAX_ARCHIVE_BYTES:
            raise WorkspaceSourceError(f"{location.name}: larger than {MAX_ARCHIVE_BYTES} bytes or {MAX_ARCHIVE_MEMBERS} members")
        budget = MAX_ARCHIVE_BYTES
        for info in infos:
            path = _archive_member_path(info.filename)
            if path == "." or path == ".git" or path.startswith(".git/"):
                continue
            if stat.S_IFMT(info.external_attr >> 16) == stat.S_IFLNK:
                raise WorkspaceSourceError(f"archive member {info.filename!r}: symlinks in zip archives are refused")
            try:
                budget = _extract_zip_member(archive, info, dest / path, budget)
            except (OSError, zipfile.BadZipFile) as exc:
                raise WorkspaceSourceError(f"archive member {info.filename!r}: {exc}") from None
            if budget < 0:
                raise WorkspaceSourceError(f"{location.name}: inflates to more than {MAX_ARCHIVE_BYTES} bytes")


def _extract_zip_member(archive: zipfile.ZipFile, info: zipfile.ZipInfo, target: Path, budget: int) -> int:
    if info.is_dir():
        target.mkdir(parents=True, exist_ok=True)
        return budget
    target.parent.mkdir(parents=True, exist_ok=True)
    with archive.open(info) as src, open(target, "xb") as out:
        # Declared sizes can lie; count what is actually inflated.
        while block := src.read(1 << 20):
            budget -= len(block)
            if budget < 0:
                return budget
            out.write(block)
    if (info.external_attr >> 16) & stat.S_IXUSR:
        target.chmod(0o755)
    return budget
