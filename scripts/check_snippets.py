#!/usr/bin/env python3
"""Checks that every C++ code block of README.md and docs/*.md is compiled by the build.

Each ```cpp block must be preceded by an HTML comment naming it:

    <!-- snippet: some-name -->
    ```cpp
    ...
    ```

and a source file under example/ or test/ (named in a CMakeLists.txt there, so the build
compiles it) must hold exactly one region of that name with the same text:

    // [snippet: some-name]
    ...
    // [snippet-end]

Both texts are compared after stripping their common leading indentation, ignoring
trailing whitespace. Prints every problem with file:line (and a diff for a mismatch);
exits 1 if there is any, 0 otherwise. Python 3 standard library only.

    scripts/check_snippets.py [--root DIR]
"""

import argparse
import difflib
import pathlib
import re
import sys

SNIPPET_COMMENT = re.compile(r"^\s*<!--\s*snippet:\s*([A-Za-z0-9_.-]+)\s*-->\s*$")
FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([^`\s]*)")
REGION_BEGIN = re.compile(r"^\s*//\s*\[snippet:\s*([A-Za-z0-9_.-]+)\s*\]\s*$")
REGION_END = re.compile(r"^\s*//\s*\[snippet-end\]\s*$")
CPP_INFO = {"cpp", "c++", "cxx"}
SOURCE_SUFFIXES = {".cpp", ".cc", ".cxx", ".hpp", ".h", ".ipp"}
SOURCE_DIRS = ("example", "test")


def normalize(lines):
    """Strips trailing whitespace and the common leading indentation of non-blank lines."""
    lines = [line.rstrip() for line in lines]
    indents = [len(line) - len(line.lstrip()) for line in lines if line]
    common = min(indents) if indents else 0
    return [line[common:] for line in lines]


def markdown_blocks(path, shown, problems):
    """Yields (name, line of the opening fence, block lines) for every named C++ block.

    `shown` is the path as printed in problems."""
    lines = path.read_text(encoding="utf-8").splitlines()
    path = shown
    pending = None  # (name, line) of a snippet comment not yet followed by its block
    i = 0
    while i < len(lines):
        line = lines[i]
        comment = SNIPPET_COMMENT.match(line)
        if comment:
            if pending:
                problems.append(f"{path}:{pending[1]}: snippet comment '{pending[0]}' "
                                "is not followed by a ```cpp block")
            pending = (comment.group(1), i + 1)
            i += 1
            continue
        fence = FENCE.match(line)
        if not fence:
            if line.strip() and pending:
                problems.append(f"{path}:{pending[1]}: snippet comment '{pending[0]}' "
                                "is not followed by a ```cpp block")
                pending = None
            i += 1
            continue
        # A fenced block: find its closing fence (same character, at least as long).
        marker = fence.group(2)
        info = fence.group(3).lower()
        start = i + 1
        j = start
        while j < len(lines):
            close = re.match(r"^\s*(`{3,}|~{3,})\s*$", lines[j])
            if close and close.group(1)[0] == marker[0] and len(close.group(1)) >= len(marker):
                break
            j += 1
        if j == len(lines):
            problems.append(f"{path}:{i + 1}: code block is never closed")
        body = lines[start:j]
        if info in CPP_INFO:
            if pending:
                yield pending[0], i + 1, body
            else:
                problems.append(f"{path}:{i + 1}: ```{info} block has no "
                                "<!-- snippet: NAME --> comment before it")
        elif pending:
            problems.append(f"{path}:{pending[1]}: snippet comment '{pending[0]}' is "
                            f"followed by a ```{info or '(no language)'} block, not ```cpp")
        pending = None
        i = j + 1
    if pending:
        problems.append(f"{path}:{pending[1]}: snippet comment '{pending[0]}' "
                        "is not followed by a ```cpp block")


def built_sources(root):
    """The file names that a CMakeLists.txt under example/ or test/ mentions, per directory."""
    names = {}
    for top in SOURCE_DIRS:
        for cmake in (root / top).rglob("CMakeLists.txt"):
            text = cmake.read_text(encoding="utf-8")
            names[cmake.parent] = set(re.findall(r"[A-Za-z0-9_.-]+\.[A-Za-z]+", text))
    return names


def source_regions(root, problems):
    """Maps a region name to a list of (path, line of the begin marker, region lines)."""
    regions = {}
    for top in SOURCE_DIRS:
        for full in sorted((root / top).rglob("*")):
            if full.suffix not in SOURCE_SUFFIXES or not full.is_file():
                continue
            path = full.relative_to(root)
            current = None  # (name, line, lines)
            for number, line in enumerate(full.read_text(encoding="utf-8").splitlines(), 1):
                begin = REGION_BEGIN.match(line)
                if begin:
                    if current:
                        problems.append(f"{path}:{number}: snippet region '{begin.group(1)}' "
                                        f"starts inside region '{current[0]}'")
                    current = (begin.group(1), number, [])
                elif REGION_END.match(line):
                    if not current:
                        problems.append(f"{path}:{number}: [snippet-end] without a region")
                        continue
                    regions.setdefault(current[0], []).append((path, current[1], current[2]))
                    current = None
                elif current:
                    current[2].append(line)
            if current:
                problems.append(f"{path}:{current[1]}: snippet region '{current[0]}' "
                                "has no [snippet-end]")
    return regions


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=pathlib.Path(__file__).resolve().parent.parent,
                        type=pathlib.Path, help="the repository root (default: this script's)")
    args = parser.parse_args()
    root = args.root.resolve()

    problems = []
    pages = [root / "README.md"] + sorted((root / "docs").glob("*.md"))
    regions = source_regions(root, problems)
    built = built_sources(root)

    checked = 0
    for page in pages:
        if not page.is_file():
            problems.append(f"{page.relative_to(root)}: missing")
            continue
        for name, line, body in markdown_blocks(page, page.relative_to(root), problems):
            checked += 1
            where = f"{page.relative_to(root)}:{line}"
            found = regions.get(name, [])
            if not found:
                problems.append(f"{where}: no region '// [snippet: {name}]' in "
                                f"{' or '.join(d + '/' for d in SOURCE_DIRS)}")
                continue
            if len(found) > 1:
                places = ", ".join(f"{p}:{n}" for p, n, _ in found)
                problems.append(f"{where}: region '{name}' is defined {len(found)} times: "
                                f"{places}")
                continue
            path, region_line, region = found[0]
            source = f"{path}:{region_line}"
            if path.name not in built.get(root / path.parent, set()):
                problems.append(f"{where}: region '{name}' is in {source}, which no "
                                f"CMakeLists.txt of its directory builds")
            expected, actual = normalize(body), normalize(region)
            if expected != actual:
                diff = difflib.unified_diff(expected, actual, fromfile=where, tofile=source,
                                            lineterm="")
                problems.append(f"{where}: snippet '{name}' differs from {source}:\n" +
                                "\n".join(diff))

    for problem in problems:
        print(problem)
    print(f"check_snippets: {checked} snippet(s) checked in {len(pages)} page(s), "
          f"{len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
