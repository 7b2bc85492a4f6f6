"""mkdocs hook: the figures committed under results/ join the site at the same paths, so that a page links
the figure a committed command made (`../results/robustness/shared/regret.png`) instead of a copy of it."""

from __future__ import annotations

from pathlib import Path

from mkdocs.structure.files import File


def on_files(files, config):
    root = Path(config.config_file_path).parent
    for png in sorted((root / "results").rglob("*.png")):
        files.append(File.generated(config, png.relative_to(root).as_posix(), abs_src_path=str(png)))
    return files
